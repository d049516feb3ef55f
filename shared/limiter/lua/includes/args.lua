-- Every limiter script takes one msgpack argument (scripts.ts); DIMS: req, in, out, tok.
local args = cmsgpack.unpack(ARGV[1])
local DIMS = args.dims or {}
