-- rpcrdma2.lua: a Wireshark dissector for the RPC-over-RDMA version 2
-- transport header (draft-cel-nfsv4-rpcrdma-version-two, "v2 draft"), which
-- Wireshark's own rpcordma dissector (version 1 only) leaves as raw data.
--
-- It registers as a heuristic on the payload of iWARP Send messages (the
-- "iwarp_ddp_rdmap" list that rpcordma also uses) and takes a message whose
-- second word (rdma_vers) is 2. It shows the header prefix (v2 draft §3.2),
-- the chunk lists with rdma_inv_handle (§3.3), RDMA2_ERROR bodies (§5.3.3)
-- and RDMA2_CONNPROP properties (§4, §5.3.4), then hands the RPC message
-- of an RDMA2_MSG to the RPC dissector.
--
--   tshark -X lua_script:contrib/rpcrdma2.lua -r capture.pcap -Y rpcrdma2
--   wireshark -X lua_script:contrib/rpcrdma2.lua capture.pcap
--
-- (or copy it to ~/.local/lib/wireshark/plugins/). Checked with tshark 4.0
-- on crates/dump/testdata/nfsrdma-own-v2.pcap by scripts/check-lua-dissector.sh.

local p = Proto("rpcrdma2", "RPC-over-RDMA version 2")

local htypes = { [0] = "RDMA2_MSG", [1] = "RDMA2_NOMSG", [4] = "RDMA2_ERROR", [5] = "RDMA2_CONNPROP" }
local errs = {
  [1] = "RDMA2_ERR_VERS", [2] = "RDMA2_ERR_BAD_XDR", [3] = "RDMA2_ERR_INVAL_HTYPE",
  [4] = "RDMA2_ERR_READ_CHUNKS", [5] = "RDMA2_ERR_WRITE_CHUNKS", [6] = "RDMA2_ERR_SEGMENTS",
  [7] = "RDMA2_ERR_WRITE_RESOURCE", [8] = "RDMA2_ERR_REPLY_RESOURCE", [9] = "RDMA2_ERR_SYSTEM",
}
local props = { [1] = "RDMA2_PROPID_RBSIZ", [2] = "RDMA2_PROPID_BRS" }

local f = {
  xid = ProtoField.uint32("rpcrdma2.xid", "XID", base.HEX),
  vers = ProtoField.uint32("rpcrdma2.vers", "Version"),
  credits = ProtoField.uint32("rpcrdma2.credits", "Credits"),
  htype = ProtoField.uint32("rpcrdma2.htype", "Header type", base.DEC, htypes),
  flags = ProtoField.uint32("rpcrdma2.flags", "Flags", base.HEX),
  response = ProtoField.bool("rpcrdma2.flags.response", "RPCRDMA2_F_RESPONSE", 32, nil, 0x1),
  inv = ProtoField.uint32("rpcrdma2.inv_handle", "Invalidate handle", base.HEX),
  position = ProtoField.uint32("rpcrdma2.position", "Position"),
  handle = ProtoField.uint32("rpcrdma2.handle", "Handle", base.HEX),
  length = ProtoField.uint32("rpcrdma2.length", "Length"),
  offset = ProtoField.uint64("rpcrdma2.offset", "Offset", base.HEX),
  nsegs = ProtoField.uint32("rpcrdma2.segments", "Segments"),
  err = ProtoField.uint32("rpcrdma2.err", "Error", base.DEC, errs),
  low = ProtoField.uint32("rpcrdma2.vers_low", "Lowest version"),
  high = ProtoField.uint32("rpcrdma2.vers_high", "Highest version"),
  prop = ProtoField.uint32("rpcrdma2.prop", "Property", base.DEC, props),
  propval = ProtoField.uint32("rpcrdma2.prop_value", "Value"),
  propdata = ProtoField.bytes("rpcrdma2.prop_data", "Data"),
}
p.fields = f

local ef_bad = ProtoExpert.new("rpcrdma2.malformed", "Malformed RPC-over-RDMA v2 header",
  expert.group.MALFORMED, expert.severity.ERROR)
p.experts = { ef_bad }

local MAX_ITEMS = 256

-- Each reader returns the next offset, or nil when the buffer ends early.
local function segment(buf, off, tree)
  if off + 16 > buf:len() then return nil end
  local t = tree:add(buf(off, 16), string.format("Segment %d@0x%x", buf(off + 4, 4):uint(), buf(off, 4):uint()))
  t:add(f.handle, buf(off, 4))
  t:add(f.length, buf(off + 4, 4))
  t:add(f.offset, buf(off + 8, 8))
  return off + 16
end

local function write_chunk(buf, off, tree, name)
  if off + 4 > buf:len() then return nil end
  local n = buf(off, 4):uint()
  if n > MAX_ITEMS then return nil end
  local t = tree:add(buf(off, 4), string.format("%s (%d segments)", name, n))
  t:add(f.nsegs, buf(off, 4))
  off = off + 4
  for _ = 1, n do
    off = segment(buf, off, t)
    if not off then return nil end
  end
  return off
end

-- rpcrdma2_chunk_lists (v2 draft §3.3).
local function chunk_lists(buf, off, tree)
  if off + 4 > buf:len() then return nil end
  tree:add(f.inv, buf(off, 4))
  off = off + 4
  local reads = tree:add(buf(off, 0), "Read list")
  for _ = 1, MAX_ITEMS + 1 do
    if off + 4 > buf:len() then return nil end
    local more = buf(off, 4):uint()
    off = off + 4
    if more == 0 then break end
    if off + 20 > buf:len() then return nil end
    reads:add(f.position, buf(off, 4))
    off = segment(buf, off + 4, reads)
    if not off then return nil end
  end
  local writes = tree:add(buf(off, 0), "Write list")
  for _ = 1, MAX_ITEMS + 1 do
    if off + 4 > buf:len() then return nil end
    local more = buf(off, 4):uint()
    off = off + 4
    if more == 0 then break end
    off = write_chunk(buf, off, writes, "Write chunk")
    if not off then return nil end
  end
  if off + 4 > buf:len() then return nil end
  local reply = buf(off, 4):uint()
  off = off + 4
  if reply ~= 0 then
    off = write_chunk(buf, off, tree, "Reply chunk")
  end
  return off
end

local function error_body(buf, off, tree)
  if off + 4 > buf:len() then return nil end
  local code = buf(off, 4):uint()
  tree:add(f.err, buf(off, 4))
  off = off + 4
  if code == 1 then
    if off + 8 > buf:len() then return nil end
    tree:add(f.low, buf(off, 4))
    tree:add(f.high, buf(off + 4, 4))
    return off + 8
  elseif code >= 4 and code <= 6 then
    if off + 4 > buf:len() then return nil end
    tree:add(buf(off, 4), "Limit: " .. buf(off, 4):uint())
    return off + 4
  end
  return off
end

local function connprop(buf, off, tree)
  if off + 4 > buf:len() then return nil end
  local n = buf(off, 4):uint()
  if n > MAX_ITEMS then return nil end
  off = off + 4
  for _ = 1, n do
    if off + 8 > buf:len() then return nil end
    local len = buf(off + 4, 4):uint()
    local padded = len + (4 - len % 4) % 4
    if off + 8 + padded > buf:len() then return nil end
    local t = tree:add(buf(off, 8 + padded), props[buf(off, 4):uint()] or ("property " .. buf(off, 4):uint()))
    t:add(f.prop, buf(off, 4))
    if len == 4 then
      t:add(f.propval, buf(off + 8, 4))
    elseif len > 0 then
      t:add(f.propdata, buf(off + 8, len))
    end
    off = off + 8 + padded
  end
  return off
end

local rpc = Dissector.get("rpc")

local function dissect(buf, pinfo, root)
  if buf:len() < 20 or buf(4, 4):uint() ~= 2 then return 0 end
  local htype = buf(12, 4):uint()
  if not htypes[htype] then return 0 end
  pinfo.cols.protocol = "RPC-RDMA2"
  local tree = root:add(p, buf(), "RPC-over-RDMA version 2")
  tree:add(f.xid, buf(0, 4))
  tree:add(f.vers, buf(4, 4))
  tree:add(f.credits, buf(8, 4))
  tree:add(f.htype, buf(12, 4))
  local ft = tree:add(f.flags, buf(16, 4))
  ft:add(f.response, buf(16, 4))
  local off
  if htype == 0 or htype == 1 then
    off = chunk_lists(buf, 20, tree)
  elseif htype == 4 then
    off = error_body(buf, 20, tree)
  else
    off = connprop(buf, 20, tree)
  end
  if not off then
    tree:add_proto_expert_info(ef_bad)
    return buf:len()
  end
  tree:set_len(off)
  pinfo.cols.info:set(htypes[htype] .. string.format(" xid=0x%08x credits=%d", buf(0, 4):uint(), buf(8, 4):uint()))
  if htype == 0 and off < buf:len() and rpc then
    rpc:call(buf(off):tvb(), pinfo, root)
  end
  return buf:len()
end

function p.dissector(buf, pinfo, root)
  return dissect(buf, pinfo, root)
end

p:register_heuristic("iwarp_ddp_rdmap", function(buf, pinfo, root)
  return dissect(buf, pinfo, root) > 0
end)
