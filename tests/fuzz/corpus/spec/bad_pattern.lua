return { name = ('aaaa'):match('(a*)*b') }
