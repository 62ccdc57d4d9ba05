local function f() while true do end end
for i = 1, 10 do pcall(f) end
return {}
