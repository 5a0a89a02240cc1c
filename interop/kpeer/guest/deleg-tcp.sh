#!/bin/bash
# deleg-tcp.sh PORT EXPORT
# The kernel NFSv4.1 client over TCP against `nfsrdma serve` on the host:
# holds a file open for writing (a write delegation is expected, granted
# over the back channel on the client's own TCP connection) for 30 s while
# the host changes the file locally (which recalls the delegation), then
# closes it and prints the client's callback and DELEGRETURN counters.
. "$KPEER_IN/guest/lib.sh"
cd "$KPEER_OUT"
PORT=${1:-2049}; EXPORT=${2:-/}
modprobe nfs; modprobe nfsv4 2>/dev/null
m=/mnt/h; mkdir -p $m
opts=vers=4.1,proto=tcp,port=$PORT,timeo=100,retrans=2
# The export by its path (the server's NFSv4 pseudo file system); "/" for
# a server whose v4 root is the export.
run timeout 90 mount -t nfs -o $opts "$HOST_IP:$EXPORT" $m || run timeout 90 mount -t nfs -o $opts "$HOST_IP:/" $m || { echo "FAIL deleg-tcp mount"; exit 1; }
grep " $m " /proc/mounts
echo hello > $m/d.txt || { echo "FAIL deleg-tcp create"; exit 1; }
exec 3>>$m/d.txt
echo held >&3
echo "holding d.txt open for writing"
sleep 30
exec 3>&-
run cat $m/d.txt
grep -A120 " mounted on $m " /proc/self/mountstats | grep -E '^\s+(OPEN|DELEGRETURN|GETATTR|CLOSE):' 
run umount $m
echo "DONE deleg-tcp"
