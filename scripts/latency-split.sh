#!/bin/bash
# scripts/latency-split.sh GUEST_PCAP HOST_PCAP GUEST_PORT HOST_PORT
#
# Splits the kernel client's small-file latency (PHASES=coherence, latency
# part) into where the time goes, per kind of call (told apart by the call's
# TCP payload size: over RDMA 176 B LOOKUP, 172 B ACCESS, 204 B READ; over
# TCP 128, 124 and 132 B):
#   guest wire   guest's call leaves eth0 -> last reply segment (PSH) arrives
#                on eth0 (qemu filter-dump, COH_GUEST_PCAP=1): slirp, socat,
#                the host's lo and our server;
#   guest think  previous reply arrives on eth0 -> this call leaves: the
#                guest kernel's own work (NFS client, xprtrdma or sunrpc TCP,
#                siw or TCP, the `cat` process);
#   server       on the host's lo: call in -> first reply byte out.
# Medians and means in ms. Needs tshark.
set -u
G=$1; H=$2; GP=$3; HP=$4
split_pcap() { # PCAP PORT LABEL
    tshark -n -r "$1" -Y "tcp.port==$2 && tcp.len>0" -T fields -e frame.time_epoch -e tcp.stream \
        -e tcp.srcport -e tcp.len -e tcp.flags.push 2>/dev/null |
    awk -v sp="$2" -v lab="$3" '
    function med(s,  a,m,i,j,t){m=split(s,a," ");for(i=2;i<=m;i++){t=a[i]+0;for(j=i-1;j>=1&&a[j]+0>t;j--)a[j+1]=a[j];a[j+1]=t};return m?a[int((m+1)/2)]:0}
    { s=$2
      if ($3==sp) {
          if (call[s]!="" && first[s]=="") { first[s]=$1; d=($1-tc[s])*1000; v[call[s]]=v[call[s]]" "d; vs[call[s]]+=d; vn[call[s]]++ }
          if ($5==1 && call[s]!="") { d=($1-tc[s])*1000; w[call[s]]=w[call[s]]" "d; ws[call[s]]+=d; wn[call[s]]++; lastr[s]=$1; call[s]="" }
      } else {
          call[s]=$4; tc[s]=$1; first[s]=""
          if (lastr[s]!="") { d=($1-lastr[s])*1000; h[$4]=h[$4]" "d; hs[$4]+=d; hn[$4]++ }
      } }
    END { for (k in wn) if (wn[k]>50)
        printf "    %-5s call %3d B: n=%d  %s p50 %.3f mean %.3f | think before it p50 %.3f mean %.3f\n", lab, k, wn[k],
            (lab=="host" ? "server" : "wire"), (lab=="host" ? med(v[k]) : med(w[k])), (lab=="host" ? vs[k]/vn[k] : ws[k]/wn[k]),
            med(h[k]), hn[k]?hs[k]/hn[k]:0 }' | sort -k3n
}
[ -s "$G" ] && split_pcap "$G" "$GP" guest
[ -s "$H" ] && split_pcap "$H" "$HP" host
