/*
 * Urgent data owned by the caller (issue 22.5): LOWCOPY_PEEK_URGENT_CALLER OR'd into the mode
 * of lowcopy_peeker_init and lowcopy_peeker_new. No SO_OOBINLINE is set (one setsockopt less),
 * the discard mechanism is used, a peek ends at the urgent mark, a peek at or past a mark ahead
 * of the head fails with -ENOMSG until the bytes before it are consumed, and then peeks deliver
 * what reads deliver (the urgent byte skipped). Refused with LOWCOPY_PEEK_OFFSET (-EINVAL) and
 * on AF_UNIX (-EOPNOTSUPP); unknown mode bits are -EINVAL. Built twice (liblowcopy.so and
 * liblowcopy.a) under AddressSanitizer. Prints "c-urgent: N passed, M failed".
 */
#define _GNU_SOURCE
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <lowcopy.h>

#include "check.h"

static lowcopy_peeker_storage store;

static void wait_urgent(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLPRI};

	if (poll(&p, 1, 3000) != 1 || !(p.revents & POLLPRI))
		die("poll(POLLPRI): no urgent byte");
}

static ssize_t peek_at(lowcopy_peeker *p, size_t off, char *buf, size_t len)
{
	return lowcopy_peeker_peek_at(p, off, buf, len, MSG_DONTWAIT, NULL, 0);
}

static void test_tcp(int family, uint32_t base)
{
	int sock, peer;
	lowcopy_peeker *p = NULL;
	lowcopy_peek_stats st;
	char buf[16] = {0}, oob = 0;

	tcp_pair(family, IPPROTO_TCP, 0, &sock, &peer);
	CHECK_EQ(lowcopy_peeker_init(&store, sizeof store, sock, base | LOWCOPY_PEEK_URGENT_CALLER,
				     family, IPPROTO_TCP, &p), 0);
	CHECK(p == (lowcopy_peeker *)&store);
	CHECK_EQ(lowcopy_peeker_mode(p), LOWCOPY_PEEK_DISCARD);
	CHECK_EQ(get_int(sock, SOL_SOCKET, SO_OOBINLINE), 0);
	/* TCP_INFO (the kind's check), SO_PEEK_OFF read, TCP_INQ: no SO_OOBINLINE. */
	CHECK_EQ(lowcopy_peeker_stats(p, &st, sizeof st), 0);
	CHECK_EQ(st.syscalls, 3);

	send_all(peer, "abcd", 4);
	if (send(peer, "X", 1, MSG_OOB) != 1)
		die("send(MSG_OOB)");
	send_all(peer, "efgh", 4);
	wait_urgent(sock);
	usleep(20000);

	CHECK_EQ(lowcopy_peeker_peek(p, buf, sizeof buf, MSG_DONTWAIT), 4);
	CHECK(memcmp(buf, "abcd", 4) == 0);
	CHECK_EQ(lowcopy_peeker_peek(p, buf, sizeof buf, MSG_DONTWAIT), -ENOMSG);
	CHECK_EQ(lowcopy_peeker_peek(p, buf, sizeof buf, 0), -ENOMSG);
	CHECK_EQ(lowcopy_peeker_offset(p), 4);
	CHECK_EQ(peek_at(p, 6, buf, 4), -ENOMSG);
	CHECK_EQ(peek_at(p, 1, buf, sizeof buf), 3);
	CHECK(memcmp(buf, "bcd", 3) == 0);
	/* The caller's own policy: it takes the urgent byte; the mark is still ahead. */
	CHECK_EQ(recv(sock, &oob, 1, MSG_OOB), 1);
	CHECK_EQ(oob, 'X');
	CHECK_EQ(peek_at(p, 4, buf, 4), -ENOMSG);
	CHECK_EQ(lowcopy_peeker_consume(p, 4), 4);
	CHECK_EQ(lowcopy_peeker_offset(p), 0);
	memset(buf, 0, sizeof buf);
	CHECK_EQ(lowcopy_peeker_peek(p, buf, sizeof buf, MSG_DONTWAIT), 4);
	CHECK(memcmp(buf, "efgh", 4) == 0);
	CHECK_EQ(lowcopy_peeker_peek(p, buf, sizeof buf, MSG_DONTWAIT), -EAGAIN);
	CHECK_EQ(lowcopy_peeker_release(p, 0), 0);
	/* Reads deliver what the peeks did. */
	memset(buf, 0, sizeof buf);
	CHECK_EQ(recv(sock, buf, sizeof buf, MSG_DONTWAIT), 4);
	CHECK(memcmp(buf, "efgh", 4) == 0);
	close(sock);
	close(peer);
}

static void test_refused(void)
{
	int sock, peer, sv[2];
	lowcopy_peeker *p = NULL;

	tcp_pair(AF_INET, IPPROTO_TCP, 0, &sock, &peer);
	CHECK_EQ(lowcopy_peeker_init(&store, sizeof store, sock,
				     LOWCOPY_PEEK_OFFSET | LOWCOPY_PEEK_URGENT_CALLER, AF_INET,
				     IPPROTO_TCP, &p), -EINVAL);
	CHECK_EQ(lowcopy_peeker_new(sock, LOWCOPY_PEEK_OFFSET | LOWCOPY_PEEK_URGENT_CALLER, &p),
		 -EINVAL);
	CHECK_EQ(lowcopy_peeker_new(sock, LOWCOPY_PEEK_AUTO | 0x200, &p), -EINVAL);
	/* Nothing was set up: SO_OOBINLINE untouched, and the new form works with the bit. */
	CHECK_EQ(get_int(sock, SOL_SOCKET, SO_OOBINLINE), 0);
	CHECK_EQ(lowcopy_peeker_new(sock, LOWCOPY_PEEK_DISCARD | LOWCOPY_PEEK_URGENT_CALLER, &p), 0);
	CHECK_EQ(get_int(sock, SOL_SOCKET, SO_OOBINLINE), 0);
	lowcopy_peeker_free(p);
	/* Without the bit, a peeker keeps urgent bytes inline, as before. */
	CHECK_EQ(lowcopy_peeker_new(sock, LOWCOPY_PEEK_DISCARD, &p), 0);
	CHECK_EQ(get_int(sock, SOL_SOCKET, SO_OOBINLINE), 1);
	lowcopy_peeker_free(p);
	close(sock);
	close(peer);

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		die("socketpair");
	CHECK_EQ(lowcopy_peeker_init(&store, sizeof store, sv[0],
				     LOWCOPY_PEEK_AUTO | LOWCOPY_PEEK_URGENT_CALLER, AF_UNIX, 0, &p),
		 -EOPNOTSUPP);
	CHECK_EQ(lowcopy_peeker_new(sv[0], LOWCOPY_PEEK_DISCARD | LOWCOPY_PEEK_URGENT_CALLER, &p),
		 -EOPNOTSUPP);
	CHECK_EQ(get_int(sv[0], SOL_SOCKET, SO_OOBINLINE), 0);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	test_tcp(AF_INET, LOWCOPY_PEEK_AUTO);
	test_tcp(AF_INET, LOWCOPY_PEEK_DISCARD);
	test_tcp(AF_INET6, LOWCOPY_PEEK_OFFSET_OR_DISCARD);
	test_refused();
	return check_summary("c-urgent");
}
