-- A reservation in the res hash: "requests|input|output|flags|scopes"; flags "" open, "s" stamped,
-- "b" begun under 'produced' (request and input then in `<id>:in`, stamped; the output open),
-- and "r" beside "s" once the call's answer brought a reading (`read`, see reading.lua).

-- `now` as given (an injected clock), else Redis's TIME in ms.
local function now_ms(given)
  if given ~= nil then
    return given
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function decode(enc)
  local req, inp, out, flags, scopes =
    string.match(enc, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  local list = {}
  for s in string.gmatch(scopes, '[^,]+') do
    list[#list + 1] = s
  end
  local read = string.find(flags, 'r', 1, true) ~= nil
  return {
    req = tonumber(req),
    inp = tonumber(inp),
    out = tonumber(out),
    flags = (string.gsub(flags, 'r', '')),
    read = read,
    scopes = list,
  }
end

local function encode(r)
  local flags = r.flags .. (r.read and 'r' or '')
  return r.req .. '|' .. r.inp .. '|' .. r.out .. '|' .. flags .. '|' .. table.concat(r.scopes, ',')
end

local FIELD = { req = 'req', ['in'] = 'inp', out = 'out' }
local function amount(r, dim)
  if dim == 'tok' then
    return r.inp + r.out
  end
  return r[FIELD[dim]]
end

local function in_scope(r, scope)
  for _, s in ipairs(r.scopes) do
    if s == scope then
      return true
    end
  end
end

-- Sums of increments by field (`t`), written once each by `flush`: a run that admits, settles
-- or expires many calls writes each field once. `suffix` names a running count ("|left").
local function add_spend(t, r, sign, suffix)
  for _, s in ipairs(r.scopes) do
    for _, d in ipairs(DIMS) do
      local f = s .. '|' .. d .. (suffix or '')
      t[f] = (t[f] or 0) + sign * amount(r, d)
    end
  end
end

local function flush(t, key)
  for f, n in pairs(t) do
    if n ~= 0 then
      redis.call('HINCRBY', key, f, n)
    end
  end
end
