-- ping: the floor of a script call (used by benches).
return 1
