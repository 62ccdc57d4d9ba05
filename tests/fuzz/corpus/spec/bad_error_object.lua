error(setmetatable({}, { __tostring = function() return 'x' end }))
