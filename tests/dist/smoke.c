/* Smoke check of the installed Debian packages (scripts/dist_test.sh), built with
 * `pkg-config --cflags --libs lowcopy`: each primitive once over a loopback TCP connection. */
#include <lowcopy.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHECK(c)                                                                   \
	do {                                                                       \
		if (!(c)) {                                                        \
			fprintf(stderr, "c smoke: %s:%d: %s\n", __FILE__, __LINE__, #c); \
			return 1;                                                  \
		}                                                                  \
	} while (0)

int main(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(l >= 0 && bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 1) == 0);
	CHECK(getsockname(l, (struct sockaddr *)&a, &al) == 0);
	int tx = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(tx >= 0 && connect(tx, (struct sockaddr *)&a, sizeof a) == 0);
	int rx = accept(l, NULL, NULL);
	CHECK(rx >= 0);
	static const char msg[] = "hello lowcopy, from the Debian packages";
	size_t len = sizeof msg - 1;

	struct lowcopy_zc *z = NULL;
	CHECK(lowcopy_zc_new(tx, LOWCOPY_ZC_AUTO, 0, &z) == 0);
	CHECK(lowcopy_zc_send(z, msg, len, 0, 42) == (ssize_t)len);
	lowcopy_zc_completion c[4];
	ssize_t n = 0;
	while (n == 0) {
		CHECK(lowcopy_zc_wait(z, 5000) >= 0);
		n = lowcopy_zc_reap(z, c, 4, sizeof c[0]);
		CHECK(n >= 0);
	}
	CHECK(c[0].user_data == 42 && c[0].result == (int64_t)len);
	printf("zerocopy send: completion user_data=%llu result=%lld (backend %u)\n",
	       (unsigned long long)c[0].user_data, (long long)c[0].result, lowcopy_zc_backend(z));

	char buf[4096];
	n = lowcopy_peek_at(rx, 6, buf, 7, 0);
	CHECK(n == 7 && memcmp(buf, msg + 6, 7) == 0);
	printf("peek at offset 6: \"%.7s\"\n", buf);

	n = lowcopy_recv_atleast(rx, buf, sizeof buf, len, 5000);
	CHECK(n == (ssize_t)len && memcmp(buf, msg, len) == 0);
	printf("recv_atleast %zu: %zd bytes\n", len, n);
	CHECK(lowcopy_zc_free(z) == 0);
	close(rx);
	close(tx);
	close(l);
	printf("c smoke: ok (liblowcopy %u.%u.%u)\n", lowcopy_version() >> 16,
	       (lowcopy_version() >> 8) & 0xff, lowcopy_version() & 0xff);
	return 0;
}
