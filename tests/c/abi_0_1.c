/*
 * A program built against liblowcopy 0.1 keeps working with this library. It declares the
 * 0.1 calls and structs itself (a frozen copy of what the 0.1 header said, for the calls whose
 * signature changed in 0.2 and the few others it uses), is linked against a stub
 * liblowcopy.so.0 without symbol versions, as the 0.1 library was (so its references are
 * unversioned, like a real 0.1 program's), and runs against the current library, where the
 * dynamic linker binds those references to the LOWCOPY_0.1 versions. Under AddressSanitizer,
 * every struct is malloc'ed at exactly its 0.1 size. Prints "c-abi-0.1: N passed, M failed".
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "check.h"

/* --- The 0.1 declarations (include/lowcopy.h of ABI 0.1). --- */
typedef struct lowcopy_peeker lowcopy_peeker;
typedef struct lowcopy_zc lowcopy_zc;
typedef struct lowcopy_zcrx lowcopy_zcrx;
typedef struct {
	uint32_t peek_off_tcp4, peek_off_tcp6, peek_off_unix, peek_off_mptcp, zerocopy_tcp,
		zerocopy_udp, uring_send_zc, uring_sendmsg_zc, tcp_zerocopy_receive_size;
} caps_0_1;
typedef struct {
	uint64_t syscalls, peeks, bytes_peeked, bytes_skipped_copied, bytes_consumed,
		rcvlowat_updates;
} peek_stats_0_1;
typedef struct {
	uint64_t calls, syscalls, wakeups, early_wakeups, timeouts, lowat_changes, bytes;
} recv_stats_0_1;
typedef struct {
	const uint8_t *data;
	size_t len;
	uint32_t mapped;
} chunk_0_1;
typedef struct {
	uint64_t bytes_mapped, bytes_copied, bytes_copybuf, chunks_mapped, chunks_copied, syscalls,
		zc_calls, zc_calls_unmapped, wakeups, peek_off_fixups;
} zcrx_stats_0_1;
typedef struct {
	uint64_t user_data;
	int64_t result;
	uint32_t flags;
} completion_0_1;
typedef struct {
	uint64_t sends, bytes, zerocopy_sends, copy_sends, completions, completions_copied, enobufs,
		window_full, syscalls_send, syscalls_reap, errqueue_other, unexpected_ids, zerocopy_off;
} zc_stats_0_1;

int lowcopy_probe(caps_0_1 *out);
int lowcopy_peeker_new(int fd, uint32_t mode, lowcopy_peeker **out);
ssize_t lowcopy_peeker_peek(lowcopy_peeker *p, void *buf, size_t len, int flags);
int lowcopy_peeker_stats(const lowcopy_peeker *p, peek_stats_0_1 *out);
void lowcopy_peeker_free(lowcopy_peeker *p);
ssize_t lowcopy_recv_atleast_stats(int fd, void *buf, size_t len, size_t min, int timeout_ms,
				   recv_stats_0_1 *stats);
int lowcopy_zcrx_new(int fd, size_t window, lowcopy_zcrx **out);
ssize_t lowcopy_zcrx_recv(lowcopy_zcrx *r, chunk_0_1 *out, int flags);
int lowcopy_zcrx_stats(const lowcopy_zcrx *r, zcrx_stats_0_1 *out);
void lowcopy_zcrx_free(lowcopy_zcrx *r);
int lowcopy_zc_new(int fd, uint32_t backend, uint32_t flags, lowcopy_zc **out);
ssize_t lowcopy_zc_send(lowcopy_zc *z, const void *buf, size_t len, int flags, uint64_t user_data);
ssize_t lowcopy_zc_send_reap(lowcopy_zc *z, const struct iovec *iov, int iovcnt, int flags,
			     uint64_t user_data, completion_0_1 *out, size_t cap, size_t *n_out);
ssize_t lowcopy_zc_reap(lowcopy_zc *z, completion_0_1 *out, size_t cap);
int lowcopy_zc_stats(const lowcopy_zc *z, zc_stats_0_1 *out);
int lowcopy_zc_free(lowcopy_zc *z);
#define PEEK_OFFSET 1
#define ZC_COPY 3
#define ZC_COPIED 1
/* --- end of the 0.1 declarations --- */

static void test_probe(void)
{
	caps_0_1 *c = block(sizeof(*c));

	CHECK_EQ(lowcopy_probe(c), 0);
	/* The 0.1 layout, holding this kernel's answers. */
	CHECK_EQ(c->peek_off_tcp4, raw_has_peek_off(AF_INET, SOCK_STREAM, 0));
	CHECK_EQ(c->peek_off_mptcp, raw_has_peek_off(AF_INET, SOCK_STREAM, IPPROTO_MPTCP));
	CHECK_EQ(c->zerocopy_tcp, raw_has_so_zerocopy(AF_INET, SOCK_STREAM));
	CHECK(c->uring_send_zc <= 1 && c->uring_sendmsg_zc <= 1);
	CHECK_EQ(c->tcp_zerocopy_receive_size, raw_zcrx_size());
	CHECK_EQ(lowcopy_probe(NULL), -EINVAL);
	free(c);
}

static void test_peek_and_recv(void)
{
	peek_stats_0_1 *ps = block(sizeof(*ps));
	recv_stats_0_1 *rs = block(sizeof(*rs));
	lowcopy_peeker *p = NULL;
	char buf[64];
	int sock, peer;

	tcp_pair(AF_INET, 0, 0, &sock, &peer);
	send_all(peer, "0123456789", 10);
	CHECK_EQ(lowcopy_peeker_new(sock, PEEK_OFFSET, &p), 0);
	CHECK_EQ(lowcopy_peeker_peek(p, buf, 4, 0), 4);
	CHECK_EQ(lowcopy_peeker_stats(p, ps), 0);
	CHECK_EQ(ps->peeks, 1);
	CHECK_EQ(ps->bytes_peeked, 4);
	CHECK_EQ(ps->rcvlowat_updates, 0);
	lowcopy_peeker_free(p);
	memset(rs, 0, sizeof(*rs));
	CHECK_EQ(lowcopy_recv_atleast_stats(sock, buf, sizeof(buf), 10, 2000, rs), 10);
	CHECK_EQ(rs->calls, 1);
	CHECK_EQ(rs->bytes, 10);
	close(sock);
	close(peer);
	free(ps);
	free(rs);
}

static void test_zc(void)
{
	completion_0_1 *out = block(8 * sizeof(*out));
	zc_stats_0_1 *st = block(sizeof(*st));
	struct iovec iov = { "abc", 3 };
	lowcopy_zc *z = NULL;
	size_t k = 99;
	int tx, rx;

	tcp_pair(AF_INET, 0, 0, &rx, &tx);
	CHECK_EQ(lowcopy_zc_new(tx, ZC_COPY, 0, &z), 0);
	CHECK_EQ(lowcopy_zc_send_reap(z, &iov, 1, 0, 7, out, 8, &k), 3);
	CHECK_EQ(k, 1);
	CHECK(out[0].user_data == 7 && out[0].result == 3 && out[0].flags == ZC_COPIED);
	for (int i = 0; i < 8; i++)
		CHECK_EQ(lowcopy_zc_send(z, "xy", 2, 0, 100 + i), 2);
	CHECK_EQ(lowcopy_zc_reap(z, out, 8), 8);
	for (int i = 0; i < 8; i++)
		CHECK(out[i].user_data == (uint64_t)(100 + i) && out[i].result == 2 &&
		      out[i].flags == ZC_COPIED);
	CHECK_EQ(lowcopy_zc_stats(z, st), 0);
	CHECK_EQ(st->sends, 9);
	CHECK_EQ(st->bytes, 19);
	CHECK_EQ(st->completions, 9);
	CHECK_EQ(st->zerocopy_off, 0);
	CHECK_EQ(lowcopy_zc_free(z), 0);
	close(tx);
	close(rx);
	free(out);
	free(st);
}

static void test_zcrx(void)
{
	chunk_0_1 *ch = block(sizeof(*ch));
	zcrx_stats_0_1 *st = block(sizeof(*st));
	lowcopy_zcrx *r = NULL;
	int sock, peer;

	tcp_pair(AF_INET, 0, 0, &sock, &peer);
	send_all(peer, "zero-copy", 9);
	shutdown(peer, SHUT_WR);
	CHECK_EQ(lowcopy_zcrx_new(sock, 65536, &r), 0);
	CHECK_EQ(lowcopy_zcrx_recv(r, ch, 0), 9);
	CHECK(ch->len == 9 && memcmp(ch->data, "zero-copy", 9) == 0 && ch->mapped == 0);
	CHECK_EQ(lowcopy_zcrx_recv(r, ch, 0), 0);
	CHECK(ch->data == NULL && ch->len == 0);
	CHECK_EQ(lowcopy_zcrx_stats(r, st), 0);
	CHECK_EQ(st->bytes_copied, 9);
	CHECK_EQ(st->peek_off_fixups, 0);
	lowcopy_zcrx_free(r);
	close(sock);
	close(peer);
	free(ch);
	free(st);
}

int main(void)
{
	test_probe();
	test_peek_and_recv();
	test_zc();
	test_zcrx();
	return check_summary("c-abi-0.1");
}
