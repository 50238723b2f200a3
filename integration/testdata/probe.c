/* probe: the integration tests' tool inside a jail. Static, so it runs in
 * any root; each subcommand tries one thing and prints what the kernel said.
 *   probe tiocsti        push a byte into the terminal on fd 0 (TIOCSTI)
 *   probe connect-lo     connect to 127.0.0.1:9; ECONNREFUSED means lo is up
 *   probe open PATH r|w  open PATH for reading or writing
 *   probe fds            list the open descriptors
 *   probe env            print the environment, one per line
 *   probe echo WORDS     print the words
 *   probe sys NAME [N]   make the syscall NAME (N times), as an attacker
 *                        would; see syscalls below
 *   probe hog MB         allocate and touch MB mebibytes, 1 MiB at a time
 *   probe spin N         spin on N threads forever
 *   probe seize PID      trace PID (PTRACE_SEIZE) and never wait for it;
 *                        print "ready", close stdout and stderr, sleep
 *   probe seize-thread PID  the same from a second thread
 *   probe traceme PROG [ARGS...]  make its parent its tracer
 *                        (PTRACE_TRACEME), then execute PROG
 *   probe thread [CODE]  start a thread that prints its thread id, and
 *                        wait forever, or with CODE until that thread is
 *                        traced, then exit CODE (exit_group)
 *   probe dodge NAME N [MS]  make the syscall NAME up to N times while
 *                        another thread floods this one with a signal whose
 *                        handler does not restart calls; if it lives, wait
 *                        MS milliseconds (a workload that goes on using its
 *                        survival), then print how many returned EINTR
 *   probe children NAME N  fork N children that each make the syscall NAME,
 *                        then make it itself
 *   probe kill-init      set RLIMIT_CPU 0 on PID 1 (prlimit64), then make it
 *                        work: it reaps 20000 orphans
 *   probe sigqueue N [hold]  queue N real-time signals to itself (blocked),
 *                        print how many the kernel took, and keep them
 *   probe mq N [hold]    open N POSIX message queues of 10 x 8 KiB, print
 *                        how many, and keep them (or remove them)
 *   probe ptys N         open N pseudo-terminals; print how many it got
 *   probe tcpfill MB     open loopback TCP connections whose receivers never
 *                        read and write into them until the kernel refuses,
 *                        or MB mebibytes are queued; print how many
 *   probe connect-unix PATH  connect to the unix socket at PATH
 *   probe net tcp|udp ADDR PORT  connect (TCP) or send a datagram and wait
 *                        for the answer (UDP) within 2 s; print "ok LINE"
 *                        (what the server answered) or the errno, and the
 *                        milliseconds it took; ADDR may be IPv4 or IPv6
 *   probe serve tcp|udp ADDR PORT  (a test host's server, not in a jail)
 *                        answer every connection or datagram with
 *                        "hello from ADDR:PORT", until killed
 *   probe tty-attack     on fds 0-2: turn off echo and canonical mode, set
 *                        TIOCEXCL, the N_NULL line discipline, a 1x1 window
 *                        and O_NONBLOCK, and write an escape sequence: what
 *                        a workload does to a terminal it is handed */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <linux/bpf.h>
#include <linux/io_uring.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <mqueue.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

extern char **environ;

static int report(int r)
{
	if (r < 0) { printf("errno %d %s\n", errno, strerror(errno)); return 1; }
	printf("ok\n");
	return 0;
}

/* int80_getpid makes getpid (20) through the ia32 entry point, which an
 * x86_64-only filter must not let through with 32-bit numbering. */
static long int80_getpid(void)
{
#if defined(__x86_64__)
	long r;
	__asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory");
	if (r < 0) { errno = (int)-r; return -1; }
	return r;
#else
	errno = ENOSYS;
	return -1;
#endif
}

static long clone_newuser(void)
{
	long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
	if (pid == 0) _exit(0);
	if (pid > 0) waitpid((pid_t)pid, NULL, 0);
	return pid;
}

/* sys makes one syscall by name and returns what it returned. */
static long sys(const char *name)
{
	char c = '#';
	if (!strcmp(name, "keyctl")) return syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3 /* session */, 0);
	if (!strcmp(name, "add_key")) return syscall(SYS_add_key, "user", "jail", "x", 1, -2 /* process */);
	if (!strcmp(name, "bpf")) { union bpf_attr a; memset(&a, 0, sizeof a); return syscall(SYS_bpf, BPF_MAP_CREATE, &a, sizeof a); }
	if (!strcmp(name, "perf_event_open")) {
		struct perf_event_attr a = {.type = PERF_TYPE_SOFTWARE, .size = sizeof a, .config = PERF_COUNT_SW_CPU_CLOCK};
		return syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
	}
	if (!strcmp(name, "userfaultfd")) return syscall(SYS_userfaultfd, 0);
	if (!strcmp(name, "io_uring_setup")) { struct io_uring_params p; memset(&p, 0, sizeof p); return syscall(SYS_io_uring_setup, 1, &p); }
	if (!strcmp(name, "unshare-user")) return unshare(CLONE_NEWUSER);
	if (!strcmp(name, "clone-user")) return clone_newuser();
	if (!strcmp(name, "mount")) return mount("none", "/tmp", "tmpfs", 0, NULL);
	if (!strcmp(name, "ptrace")) return ptrace(PTRACE_TRACEME, 0, NULL, NULL);
	if (!strcmp(name, "tiocsti-high")) return syscall(SYS_ioctl, 0, (1UL << 32) | TIOCSTI, &c);
	if (!strcmp(name, "vsock")) return socket(AF_VSOCK, SOCK_STREAM, 0);
	/* Ways past an IP allow-list: hand-made packets (any source address,
	 * any protocol), frames below IP, ICMP echo. */
	if (!strcmp(name, "raw-socket")) return socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
	if (!strcmp(name, "packet-socket")) return socket(AF_PACKET, SOCK_RAW, 0);
	if (!strcmp(name, "ping-socket")) return socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP);
	if (!strcmp(name, "netlink-audit")) return socket(AF_NETLINK, SOCK_RAW, 9 /* NETLINK_AUDIT */);
	if (!strcmp(name, "open_by_handle_at")) {
		struct { unsigned int bytes; int type; unsigned char h[8]; } fh = {8, 1, {0}};
		return syscall(SYS_open_by_handle_at, AT_FDCWD, &fh, O_RDONLY);
	}
	if (!strcmp(name, "int80")) return int80_getpid();
	if (!strcmp(name, "x32")) return syscall(0x40000000 | SYS_getpid);
	if (!strcmp(name, "getpid")) return syscall(SYS_getpid);
	errno = EINVAL;
	return -2;
}

static pid_t dodge_tid;
static void on_usr1(int sig) { (void)sig; }
static void *flood(void *arg)
{
	(void)arg;
	for (;;) syscall(SYS_tgkill, getpid(), dodge_tid, SIGUSR1);
	return NULL;
}

static void *seize(void *arg)
{
	if (ptrace(PTRACE_SEIZE, (pid_t)atoi(arg), NULL, NULL) < 0) exit(report(-1));
	printf("ready\n");
	fflush(stdout);
	close(1);
	close(2);
	for (;;) pause();
	return NULL;
}

static volatile pid_t said_tid;
static void *say_tid(void *arg)
{
	(void)arg;
	said_tid = (pid_t)syscall(SYS_gettid);
	printf("%ld\n", (long)said_tid);
	fflush(stdout);
	for (;;) pause();
	return NULL;
}

static void *spin(void *arg)
{
	(void)arg;
	for (volatile unsigned long i = 0;; i++);
	return NULL;
}

/* sockaddr_of fills an IPv4 or IPv6 address and port. "gateway" is the
 * default route's gateway (/proc/net/route), "eth0" that interface's
 * IPv4 address. */
static socklen_t sockaddr_of(struct sockaddr_storage *ss, const char *addr, int port)
{
	memset(ss, 0, sizeof *ss);
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
	if (!strcmp(addr, "gateway")) {
		FILE *f = fopen("/proc/net/route", "r");
		char line[256], ifn[32];
		unsigned dst, gw;
		while (f && fgets(line, sizeof line, f))
			if (sscanf(line, "%31s %x %x", ifn, &dst, &gw) == 3 && dst == 0) {
				a4->sin_family = AF_INET, a4->sin_port = htons(port), a4->sin_addr.s_addr = gw;
				fclose(f);
				return sizeof *a4;
			}
		fprintf(stderr, "probe: no default route\n");
		exit(2);
	}
	if (!strcmp(addr, "eth0")) {
		struct ifreq ifr = {0};
		int s = socket(AF_INET, SOCK_DGRAM, 0);
		strcpy(ifr.ifr_name, "eth0");
		if (s < 0 || ioctl(s, SIOCGIFADDR, &ifr) < 0) { perror("probe: eth0"); exit(2); }
		close(s);
		*a4 = *(struct sockaddr_in *)&ifr.ifr_addr;
		a4->sin_port = htons(port);
		return sizeof *a4;
	}
	if (inet_pton(AF_INET, addr, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET, a4->sin_port = htons(port);
		return sizeof *a4;
	}
	if (inet_pton(AF_INET6, addr, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6, a6->sin6_port = htons(port);
		return sizeof *a6;
	}
	fprintf(stderr, "probe: bad address %s\n", addr);
	exit(2);
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* net_client connects (tcp) or sends one datagram (udp) and reads the
 * answer, within 2 s. */
static int net_client(const char *proto, const char *addr, int port)
{
	struct sockaddr_storage ss;
	socklen_t len = sockaddr_of(&ss, addr, port);
	int udp = !strcmp(proto, "udp");
	double t0 = now_ms();
	int s = socket(ss.ss_family, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_NONBLOCK, 0);
	char buf[128] = {0};
	int r = s < 0 ? -1 : connect(s, (struct sockaddr *)&ss, len);
	if (r < 0 && errno == EINPROGRESS) {
		struct pollfd p = {.fd = s, .events = POLLOUT};
		int err = 0;
		socklen_t el = sizeof err;
		r = poll(&p, 1, 2000);
		if (r == 0) errno = ETIMEDOUT, r = -1;
		else if (r > 0 && (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err)) errno = err, r = -1;
		else if (r > 0) r = 0;
	}
	if (r == 0 && udp && send(s, "hi", 2, 0) < 0) r = -1;
	if (r == 0) {
		struct pollfd p = {.fd = s, .events = POLLIN};
		r = poll(&p, 1, 2000);
		if (r == 0) errno = ETIMEDOUT, r = -1;
		else if (r > 0) {
			ssize_t n = recv(s, buf, sizeof buf - 1, 0);
			if (n < 0) r = -1;
			else buf[n > 0 && buf[n - 1] == '\n' ? n - 1 : n] = 0, r = 0;
		}
	}
	double ms = now_ms() - t0;
	if (r < 0) { printf("errno %d %s %.0fms\n", errno, strerror(errno), ms); return 1; }
	printf("ok %s %.0fms\n", buf, ms);
	return 0;
}

/* net_serve answers every TCP connection or UDP datagram. With proto
 * "tcp-hold" it never closes a connection: a client that closes first
 * waits in FIN_WAIT_2 for a FIN that does not come. */
static int net_serve(const char *proto, const char *addr, int port)
{
	struct sockaddr_storage ss;
	socklen_t len = sockaddr_of(&ss, addr, port);
	int udp = !strcmp(proto, "udp"), hold = !strcmp(proto, "tcp-hold"), one = 1;
	char msg[96];
	snprintf(msg, sizeof msg, "hello from %s:%d\n", addr, port);
	int s = socket(ss.ss_family, udp ? SOCK_DGRAM : SOCK_STREAM, 0);
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (ss.ss_family == AF_INET6) setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
	if (s < 0 || bind(s, (struct sockaddr *)&ss, len) < 0 || (!udp && listen(s, 64) < 0)) {
		perror("probe serve");
		return 1;
	}
	printf("listening\n");
	fflush(stdout);
	for (;;) {
		if (udp) {
			struct sockaddr_storage from;
			socklen_t fl = sizeof from;
			char b[64];
			if (recvfrom(s, b, sizeof b, 0, (struct sockaddr *)&from, &fl) >= 0)
				sendto(s, msg, strlen(msg), 0, (struct sockaddr *)&from, fl);
			continue;
		}
		int c = accept(s, NULL, NULL);
		if (c < 0) continue;
		if (write(c, msg, strlen(msg)) < 0) { /* the client went */ }
		if (!hold) close(c);
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) return 2;
	if (!strcmp(argv[1], "net") && argc == 5) return net_client(argv[2], argv[3], atoi(argv[4]));
	if (!strcmp(argv[1], "serve") && argc == 5) return net_serve(argv[2], argv[3], atoi(argv[4]));
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
	if (!strcmp(argv[1], "sys") && argc >= 3) {
		long r = 0;
		for (int i = 0, n = argc > 3 ? atoi(argv[3]) : 1; i < n; i++) r = sys(argv[2]);
		if (r == -2) return 2;
		return report(r < 0 ? -1 : 0);
	}
	if (!strcmp(argv[1], "hog") && argc == 3) {
		for (long i = 0, n = atol(argv[2]); i < n; i++) {
			char *p = malloc(1 << 20);
			if (!p) return report(-1);
			memset(p, 1, 1 << 20);
		}
		return report(0);
	}
	if ((!strcmp(argv[1], "seize") || !strcmp(argv[1], "seize-thread")) && argc == 3) {
		/* Traces pid (PTRACE_SEIZE) and never waits for it, so its
		 * zombie cannot be reaped while this runs; says "ready", lets go
		 * of stdout and stderr, and sleeps. seize-thread traces from a
		 * second thread. */
		if (argv[1][5] == '-') {
			pthread_t t;
			if (pthread_create(&t, NULL, seize, argv[2]) != 0) return report(-1);
			for (;;) pause();
		}
		seize(argv[2]);
	}
	if (!strcmp(argv[1], "traceme") && argc >= 3) {
		if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0) return report(-1);
		execv(argv[2], argv + 2);
		return report(-1);
	}
	if (!strcmp(argv[1], "thread") && (argc == 2 || argc == 3)) {
		pthread_t t;
		if (pthread_create(&t, NULL, say_tid, NULL) != 0) return report(-1);
		if (argc == 2)
			for (;;) pause();
		for (;;) { /* until a TracerPid other than 0 in a thread's status */
			char path[64], buf[4096];
			pid_t tid;
			while ((tid = said_tid) == 0) usleep(1000);
			snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
			int fd = open(path, O_RDONLY | O_CLOEXEC);
			ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
			if (fd >= 0) close(fd);
			if (n <= 0) return report(-1);
			buf[n] = 0;
			char *f = strstr(buf, "\nTracerPid:");
			if (f && atoi(f + 11) != 0) exit(atoi(argv[2]));
			usleep(1000);
		}
	}
	if (!strcmp(argv[1], "spin") && argc == 3) {
		for (int i = 1, n = atoi(argv[2]); i < n; i++) {
			pthread_t t;
			if (pthread_create(&t, NULL, spin, NULL) != 0) return report(-1);
		}
		spin(NULL);
	}
	if (!strcmp(argv[1], "dodge") && argc >= 4) {
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_usr1; /* no SA_RESTART: an interrupted call returns EINTR */
		sigaction(SIGUSR1, &sa, NULL);
		dodge_tid = (pid_t)syscall(SYS_gettid);
		pthread_t t;
		if (pthread_create(&t, NULL, flood, NULL) != 0) return report(-1);
		int eintr = 0, n = atoi(argv[3]);
		for (int i = 0; i < n; i++)
			if (sys(argv[2]) < 0 && errno == EINTR) eintr++;
		if (argc > 4) { /* the flood interrupts sleeps: sleep to a deadline */
			struct timespec end;
			clock_gettime(CLOCK_MONOTONIC, &end);
			end.tv_sec += atoi(argv[4]) / 1000;
			end.tv_nsec += (long)(atoi(argv[4]) % 1000) * 1000000;
			if (end.tv_nsec >= 1000000000) { end.tv_sec++; end.tv_nsec -= 1000000000; }
			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &end, NULL) == EINTR);
		}
		printf("survived eintr=%d of %d\n", eintr, n);
		fflush(stdout);
		_exit(0);
	}
	if (!strcmp(argv[1], "children") && argc == 4) {
		for (int i = 0, n = atoi(argv[3]); i < n; i++) {
			pid_t pid = fork();
			if (pid == 0) { sys(argv[2]); _exit(0); }
			if (pid > 0) waitpid(pid, NULL, 0);
		}
		return report(sys(argv[2]) < 0 ? -1 : 0);
	}
	if (!strcmp(argv[1], "kill-init")) {
		struct rlimit zero = {0, 0};
		if (syscall(SYS_prlimit64, 1, RLIMIT_CPU, &zero, NULL) < 0) return report(-1);
		printf("set\n");
		fflush(stdout);
		for (int i = 0; i < 20000; i++) { /* orphans: PID 1 reaps each, runs, and its CPU limit fires */
			pid_t pid = fork();
			if (pid == 0) { if (fork() == 0) _exit(0); _exit(0); }
			if (pid > 0) waitpid(pid, NULL, 0);
		}
		printf("PID 1 survived\n");
		return 0;
	}
	if (!strcmp(argv[1], "sigqueue") && argc >= 3) {
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, SIGRTMIN + 6);
		sigprocmask(SIG_BLOCK, &set, NULL);
		int n = atoi(argv[2]), ok = 0;
		union sigval v = {0};
		while (ok < n && sigqueue(getpid(), SIGRTMIN + 6, v) == 0) ok++;
		printf("queued %d%s\n", ok, ok < n ? (errno == EAGAIN ? " EAGAIN" : " error") : "");
		fflush(stdout);
		if (argc > 3) sleep(30);
		return ok == n ? 0 : 1;
	}
	if (!strcmp(argv[1], "mq") && argc >= 3) {
		int n = atoi(argv[2]), ok = 0;
		struct mq_attr a = {.mq_maxmsg = 10, .mq_msgsize = 8192};
		char name[32];
		for (; ok < n; ok++) {
			snprintf(name, sizeof name, "/jail-probe-%d-%d", (int)getpid(), ok);
			if (mq_open(name, O_CREAT | O_EXCL | O_RDWR, 0600, &a) < 0) break;
		}
		int err = errno;
		printf("queues %d%s\n", ok, ok < n ? (err == EMFILE ? " EMFILE" : " error") : "");
		fflush(stdout);
		if (argc > 3) sleep(30);
		for (int i = 0; i < ok; i++) {
			snprintf(name, sizeof name, "/jail-probe-%d-%d", (int)getpid(), i);
			mq_unlink(name);
		}
		return ok == n ? 0 : 1;
	}
	if (!strcmp(argv[1], "ptys") && argc == 3) {
		int n = atoi(argv[2]), ok = 0;
		while (ok < n && open("/dev/ptmx", O_RDWR | O_NOCTTY) >= 0) ok++;
		printf("ptys %d%s\n", ok, ok < n ? (errno == ENOSPC ? " ENOSPC" : " error") : "");
		return 0;
	}
	if (!strcmp(argv[1], "tcpfill") && argc == 3) {
		long max = atol(argv[2]) << 20, queued = 0;
		struct sockaddr_in a = {.sin_family = AF_INET};
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		socklen_t al = sizeof a;
		int l = socket(AF_INET, SOCK_STREAM, 0);
		if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 512) < 0 ||
		    getsockname(l, (struct sockaddr *)&a, &al) < 0)
			return report(-1);
		static char buf[65536];
		for (int i = 0; i < 300 && queued < max; i++) {
			int c = socket(AF_INET, SOCK_STREAM, 0);
			if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) < 0 || accept(l, NULL, NULL) < 0) break;
			fcntl(c, F_SETFL, O_NONBLOCK);
			for (int stalls = 0; queued < max && stalls < 4;) {
				ssize_t n = write(c, buf, sizeof buf);
				if (n > 0) { queued += n; stalls = 0; continue; }
				if (errno != EAGAIN) break;
				stalls++;
				usleep(1000); /* let the receive side take what it can */
			}
		}
		printf("tcp queued %ld MiB\n", queued >> 20);
		return 0;
	}
	if (!strcmp(argv[1], "connect-unix") && argc == 3) {
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		strncpy(a.sun_path, argv[2], sizeof a.sun_path - 1);
		int s = socket(AF_UNIX, SOCK_STREAM, 0);
		return report(s < 0 ? s : connect(s, (struct sockaddr *)&a, sizeof a));
	}
	if (!strcmp(argv[1], "tty-attack")) {
		int ttys = 0;
		for (int fd = 0; fd <= 2; fd++) {
			struct termios t;
			struct winsize w = {1, 1, 0, 0};
			int ld = 27; /* N_NULL */
			if (tcgetattr(fd, &t) == 0) {
				ttys++;
				t.c_lflag &= ~(tcflag_t)(ECHO | ICANON);
				tcsetattr(fd, TCSANOW, &t);
			}
			ioctl(fd, TIOCEXCL);
			ioctl(fd, TIOCSETD, &ld);
			ioctl(fd, TIOCSWINSZ, &w);
			int fl = fcntl(fd, F_GETFL);
			if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
			static const char esc[] = "\033]0;PWNED\007PAST-CAPTURE\n";
			(void)!write(fd, esc, sizeof esc - 1);
		}
		printf("terminals %d\n", ttys);
		return 0;
	}
	if (!strcmp(argv[1], "echo")) { for (int i = 2; i < argc; i++) printf("%s\n", argv[i]); return 0; }
	return 2;
}
