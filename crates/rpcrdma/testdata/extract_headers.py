import json, subprocess, sys
out = []
for pcap in ["nfsrdma-v3.pcap", "nfsrdma-v4.1.pcap"]:
    j = subprocess.run(["tshark","-r",pcap,"-Y","rpcordma","-T","json","-x","--no-duplicate-keys"],capture_output=True,text=True).stdout
    pkts = json.loads(j)
    for p in pkts:
        L = p["_source"]["layers"]
        fr = L["frame"]["frame.number"]
        raws = L["rpcordma_raw"]
        if isinstance(raws[0], list):
            raws = raws
        else:
            raws = [raws]
        srcport = L["tcp"]["tcp.srcport"] if isinstance(L["tcp"], dict) else L["tcp"][0]["tcp.srcport"]
        d = "s2c" if srcport == "20049" else "c2s"
        for r in raws:
            out.append(f"{pcap} {fr} {d} {r[0]}")
print("\n".join(out))
