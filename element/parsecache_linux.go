package element

import "syscall"

// statCtime is a file's change time in ns; ok is false where the platform has none.
func statCtime(st *syscall.Stat_t) (int64, bool) { return st.Ctim.Sec*1e9 + st.Ctim.Nsec, true }
