local t = {} for i = 1, 100 do t[i] = string.rep('x', 1 << 20) end return t
