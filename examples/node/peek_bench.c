/* The C side of examples/node/bench.js: the per-call cost of lowcopy_peeker_peek through the C
 * library, measured the way bench.js measures Peeker.peekInto: a loopback TCP pair with 64 KiB
 * queued, a peeker (AUTO), then `iters` x (seek to 0, peek `size` bytes), timed as a whole.
 *   peek_bench SIZE ITERS [seek]   prints "ns_per_call N" (with "seek": the seeks alone)
 * Built by node/scripts/demo.sh against build/lib (pkg-config lowcopy). */
#include <arpa/inet.h>
#include <lowcopy.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what) {
	perror(what);
	exit(1);
}

int main(int argc, char **argv) {
	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: peek_bench SIZE ITERS [seek]\n");
		return 2;
	}
	size_t size = strtoul(argv[1], NULL, 10);
	long iters = strtol(argv[2], NULL, 10);
	int seek_only = argc == 4;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	if (l < 0 || bind(l, (struct sockaddr *)&a, len) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&a, &len))
		die("listen");
	int c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, len))
		die("connect");
	int s = accept(l, NULL, NULL);
	if (s < 0)
		die("accept");
	static char data[65536];
	memset(data, 'x', sizeof(data));
	if (write(c, data, sizeof(data)) != (ssize_t)sizeof(data))
		die("write");
	for (int q = 0; q < (int)sizeof(data);) {
		if (ioctl(s, FIONREAD, &q))
			die("FIONREAD");
		if (q < (int)sizeof(data))
			usleep(1000);
	}
	struct lowcopy_peeker *p;
	if (lowcopy_peeker_new(s, LOWCOPY_PEEK_AUTO, &p))
		die("lowcopy_peeker_new");
	char *buf = malloc(size);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < iters; i++) {
		lowcopy_peeker_seek(p, 0);
		if (!seek_only && lowcopy_peeker_peek(p, buf, size, MSG_DONTWAIT) != (ssize_t)size)
			die("peek");
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
	printf("ns_per_call %.1f\n", ns / iters);
	lowcopy_peeker_free(p);
	free(buf);
	close(s);
	close(c);
	close(l);
	return 0;
}
