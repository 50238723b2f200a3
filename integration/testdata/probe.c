/* probe: the integration tests' tool inside a jail. Static, so it runs in
 * any root; each subcommand tries one thing and prints what the kernel said.
 *   probe tiocsti        push a byte into the terminal on fd 0 (TIOCSTI)
 *   probe connect-lo     connect to 127.0.0.1:9; ECONNREFUSED means lo is up
 *   probe open PATH r|w  open PATH for reading or writing
 *   probe fds            list the open descriptors
 *   probe env            print the environment, one per line
 *   probe echo WORDS     print the words */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

extern char **environ;

static int report(int r)
{
	if (r < 0) { printf("errno %d %s\n", errno, strerror(errno)); return 1; }
	printf("ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) return 2;
	if (!strcmp(argv[1], "tiocsti")) { char c = '#'; return report(ioctl(0, TIOCSTI, &c)); }
	if (!strcmp(argv[1], "connect-lo")) {
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(9)};
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		int s = socket(AF_INET, SOCK_STREAM, 0);
		return report(s < 0 ? s : connect(s, (struct sockaddr *)&a, sizeof a));
	}
	if (!strcmp(argv[1], "open") && argc == 4) return report(open(argv[2], argv[3][0] == 'w' ? O_WRONLY : O_RDONLY));
	if (!strcmp(argv[1], "fds")) {
		for (int fd = 0; fd < 65536; fd++) if (fcntl(fd, F_GETFD) >= 0) printf("%d\n", fd);
		return 0;
	}
	if (!strcmp(argv[1], "env")) { for (char **e = environ; *e; e++) printf("%s\n", *e); return 0; }
	if (!strcmp(argv[1], "echo")) { for (int i = 2; i < argc; i++) printf("%s\n", argv[i]); return 0; }
	return 2;
}
