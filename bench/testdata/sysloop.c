/* sysloop: a syscall-heavy workload for bench/seccomp.sh.
 *   sysloop getppid N   N getppid(2) calls: the filter's cost per syscall
 *   sysloop read N      N small reads of /etc/hostname: open-read-close */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3) return 2;
	long n = atol(argv[2]);
	char buf[64];
	if (!strcmp(argv[1], "getppid")) {
		for (long i = 0; i < n; i++) syscall(SYS_getppid);
		return 0;
	}
	if (!strcmp(argv[1], "read")) {
		for (long i = 0; i < n; i++) {
			int fd = open("/etc/hostname", O_RDONLY | O_CLOEXEC);
			if (fd < 0 || read(fd, buf, sizeof buf) < 0) return 1;
			close(fd);
		}
		return 0;
	}
	return 2;
}
