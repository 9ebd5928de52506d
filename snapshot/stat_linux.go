package snapshot

import (
	"io/fs"
	"syscall"
)

// sysStat fills the inode, device and ctime of st from fi, when fi comes from
// the operating system.
func sysStat(fi fs.FileInfo, st *fileStat) {
	if s, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.Ino, st.Dev = s.Ino, uint64(s.Dev)
		st.Ctime = s.Ctim.Nano()
	}
}
