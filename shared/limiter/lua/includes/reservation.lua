-- A reservation is stored in the res hash as "requests|input|output|flags|scope1,scope2" where
-- flags is "s" once its stamp is final, "b" once the provider's response began but the
-- reservation stays open (actual accounting): its request and input then live in a part of
-- their own, `<id>:in`, stamped when the response began (see start). A settle that gave output
-- back appends "|reservedOutput": what the provider counted until the call ended (see observe).

-- `now` as given (an injected clock), else Redis's TIME in ms.
local function now_ms(given)
  if given ~= nil then return given end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function decode(enc)
  local req, inp, out, flags, scopes, rout =
    string.match(enc, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|?([^|]*)$')
  local list = {}
  for s in string.gmatch(scopes, '[^,]+') do list[#list + 1] = s end
  return { req = tonumber(req), inp = tonumber(inp), out = tonumber(out), flags = flags, scopes = list,
    rout = tonumber(rout) }
end

local function encode(r)
  local enc = r.req .. '|' .. r.inp .. '|' .. r.out .. '|' .. r.flags .. '|' .. table.concat(r.scopes, ',')
  if r.rout and r.rout ~= r.out then enc = enc .. '|' .. r.rout end
  return enc
end

-- The amount a reservation spends of one dimension.
local function amount(r, dim)
  if dim == 'req' then return r.req end
  if dim == 'in' then return r.inp end
  if dim == 'out' then return r.out end
  return r.inp + r.out
end

-- The entry holding a begun call's request and input under 'actual' accounting (see start).
local function input_part(id)
  return id .. ':in'
end

-- The entry holding the k-th part of a streamed call's output, stamped when it arrived (see
-- settle).
local function output_part(id, k)
  return id .. ':o' .. k
end
