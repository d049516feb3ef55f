-- Every limiter script takes one structured argument, packed by scripts.ts (msgpack): ARGV[1].
local args = cmsgpack.unpack(ARGV[1])
-- The dimensions' short names in their one order (shared/dimensions.ts): req, in, out, tok.
local DIMS = args.dims or {}
