/*
 * A panic inside the library: its own code, -ENOTRECOVERABLE; a handle on which it happened
 * refuses every later call; *_free still releases it (LeakSanitizer, part of ASan, reports
 * what is not). Runs against a library built with the test-only cargo feature
 * `fault-injection` (build/fault), whose lowcopy_test_panic_after(n) makes the n-th guarded
 * call from then panic; the release library has no such function. Prints
 * "c-fault-panic: N passed, M failed".
 */
#define _GNU_SOURCE
#include <sys/uio.h>

#include <lowcopy.h>

#include "check.h"

/* Exported by the fault-injection build only. */
void lowcopy_test_panic_after(uint32_t n);

static void test_stateless(int sock)
{
	lowcopy_peeker *p = (lowcopy_peeker *)0x1; /* sentinel: untouched on failure */
	char buf[4];

	lowcopy_test_panic_after(1);
	CHECK_EQ(lowcopy_peek_supported(sock), -ENOTRECOVERABLE);
	/* No handle, nothing half-updated: the next call works. */
	CHECK_EQ(lowcopy_peek_supported(sock), 1);
	lowcopy_test_panic_after(1);
	CHECK_EQ(lowcopy_peek_at(sock, 0, buf, sizeof(buf), MSG_DONTWAIT), -ENOTRECOVERABLE);
	lowcopy_test_panic_after(1);
	CHECK_EQ(lowcopy_peeker_new(sock, LOWCOPY_PEEK_AUTO, &p), -ENOTRECOVERABLE);
	CHECK_EQ((uintptr_t)p, 1);
}

static void test_peeker(int sock, int peer)
{
	lowcopy_peeker *p = NULL, *other = NULL;
	lowcopy_peek_stats st;
	char buf[8];

	if (write(peer, "abcdefgh", 8) != 8)
		die("write");
	usleep(20000);
	CHECK_EQ(lowcopy_peeker_new(sock, LOWCOPY_PEEK_OFFSET, &p), 0);
	CHECK_EQ(lowcopy_peeker_peek(p, buf, 3, 0), 3);
	lowcopy_test_panic_after(1);
	/* The peek ran (the cursor moved), then the call panicked: the caller gets the panic's
	 * code, not the bytes, and the handle is done. */
	CHECK_EQ(lowcopy_peeker_peek(p, buf, 3, 0), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_peeker_peek(p, buf, 3, 0), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_peeker_seek(p, 0), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_peeker_consume(p, 1), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_peeker_note_consumed(p, 1), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_peeker_set_lowat_armed(p, 1), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_peeker_stats(p, &st, sizeof(st)), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_peeker_offset(p), 0);
	CHECK_EQ(lowcopy_peeker_mode(p), LOWCOPY_PEEK_AUTO);
	/* NULL is still NULL. */
	CHECK_EQ(lowcopy_peeker_stats(NULL, &st, sizeof(st)), -EINVAL);
	/* Free releases it and still restores the socket: SO_PEEK_OFF disabled, nothing read. */
	lowcopy_peeker_free(p);
	CHECK_EQ(get_int(sock, SOL_SOCKET, SO_PEEK_OFF), -1);

	/* A panic in a read-only call poisons its handle too; other handles are independent. */
	CHECK_EQ(lowcopy_peeker_new(sock, LOWCOPY_PEEK_DISCARD, &p), 0);
	CHECK_EQ(lowcopy_peeker_new(sock, LOWCOPY_PEEK_DISCARD, &other), 0);
	lowcopy_test_panic_after(1);
	CHECK_EQ(lowcopy_peeker_offset(p), 0);
	CHECK_EQ(lowcopy_peeker_peek(p, buf, 8, 0), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_peeker_peek(other, buf, 8, 0), 8);
	CHECK_EQ(memcmp(buf, "abcdefgh", 8), 0);
	lowcopy_peeker_free(p);
	lowcopy_peeker_free(other);
	CHECK_EQ(read(sock, buf, 8), 8);
}

static void test_zc(void)
{
	lowcopy_zc_completion c[4];
	lowcopy_zc_send_stats st;
	lowcopy_zc *z = NULL;
	int tx, rx;

	tcp_pair(AF_INET, 0, 0, &rx, &tx);
	CHECK_EQ(lowcopy_zc_new(tx, LOWCOPY_ZC_COPY, 0, &z), 0);
	CHECK_EQ(lowcopy_zc_send(z, "one", 3, 0, 1), 3);
	lowcopy_test_panic_after(1);
	CHECK_EQ(lowcopy_zc_send(z, "two", 3, 0, 2), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_zc_send(z, "three", 5, 0, 3), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_zc_reap(z, c, 4, sizeof(c[0])), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_zc_wait(z, 0), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_zc_stats(z, &st, sizeof(st)), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_zc_pollfd(z), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_zc_inflight(z), 0);
	CHECK_EQ(lowcopy_zc_backend(z), LOWCOPY_ZC_AUTO);
	/* Released, and told that its state is unknown. */
	CHECK_EQ(lowcopy_zc_free(z), -ENOTRECOVERABLE);
	close(tx);
	close(rx);
}

static void test_zcrx(void)
{
	lowcopy_zcrx_recv_stats st;
	lowcopy_zcrx_chunk ch;
	lowcopy_zcrx *r = NULL;
	int sock, peer;

	tcp_pair(AF_INET, 0, 0, &sock, &peer);
	if (write(peer, "data", 4) != 4)
		die("write");
	CHECK_EQ(lowcopy_zcrx_new(sock, 65536, &r), 0);
	lowcopy_test_panic_after(1);
	CHECK_EQ(lowcopy_zcrx_recv(r, &ch, sizeof(ch), 0), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_zcrx_recv(r, &ch, sizeof(ch), MSG_DONTWAIT), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_zcrx_stats(r, &st, sizeof(st)), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_zcrx_window(r), 0);
	lowcopy_zcrx_free(r);
	close(sock);
	close(peer);
}

static void test_receiver(void)
{
	lowcopy_recv_stats st;
	lowcopy_receiver *rcv = NULL;
	char buf[16];
	int sock, peer;

	tcp_pair(AF_INET, 0, 0, &sock, &peer);
	CHECK_EQ(lowcopy_receiver_new(sock, &rcv), 0);
	if (write(peer, "abcd", 4) != 4)
		die("write");
	lowcopy_test_panic_after(1);
	CHECK_EQ(lowcopy_receiver_recv(rcv, buf, sizeof(buf), 4, 1000), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_receiver_recv(rcv, buf, sizeof(buf), 1, 0), -ENOTRECOVERABLE);
	CHECK_EQ(lowcopy_receiver_stats(rcv, &st, sizeof(st)), -ENOTRECOVERABLE);
	lowcopy_receiver_free(rcv);
	close(sock);
	close(peer);
}

int main(void)
{
	int sock, peer;

	tcp_pair(AF_INET, 0, 0, &sock, &peer);
	test_stateless(sock);
	test_peeker(sock, peer);
	close(sock);
	close(peer);
	test_zc();
	test_zcrx();
	test_receiver();
	return check_summary("c-fault-panic");
}
