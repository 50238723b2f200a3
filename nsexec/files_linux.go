package nsexec

// extern int jail_files_role;
import "C"

import "os"

// FilesSocket is the files helper's descriptor of its sync socket
// (files.c moves it there).
const FilesSocket = 3

// FilesHelper reports whether this process is a files helper
// ([FilesArg0]) whose C stage has joined a session and become its
// workload's user, and returns its sync socket: the parent's request comes
// on it, and the answer goes back on it. Standard input and output carry
// the operation's data. The caller serves one operation and exits; it must
// load its seccomp filter first (the stage loads none).
func FilesHelper() (*os.File, bool) {
	if C.jail_files_role == 0 {
		return nil, false
	}
	return os.NewFile(FilesSocket, "jail-files"), true
}
