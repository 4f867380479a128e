/*
 * The growth rule, from the program's side: this file is ordinary client code (every struct
 * passed with sizeof(its type)), compiled twice against variants of include/lowcopy.h that
 * tests/c/layout_header.py writes:
 *   LAYOUT_OLDER  every struct one field shorter (a program built against an older library)
 *   LAYOUT_NEWER  every struct one uint64_t longer (a program built against a newer library)
 * and run against the current liblowcopy.so under AddressSanitizer. Every struct the library
 * fills is malloc'ed at exactly its size, so one byte written past it is a heap overflow
 * report. The fields both layouts have must hold the right values; the newer layout's extra
 * field must read 0 (in/out structs: keep the program's value). Prints
 * "c-layout-older: N passed, M failed" (or -newer).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/uio.h>

#include <lowcopy.h>

#include "check.h"

#if defined(LAYOUT_OLDER) == defined(LAYOUT_NEWER)
#error "build with -DLAYOUT_OLDER or -DLAYOUT_NEWER"
#endif

#ifdef LAYOUT_NEWER
#define SUITE "c-layout-newer"
/* The field this library does not know reads 0. */
#define CHECK_LATER_ZERO(s) CHECK_EQ((s)->lowcopy_test_later, 0)
#else
#define SUITE "c-layout-older"
#define CHECK_LATER_ZERO(s) ((void)(s))
#endif

static void test_probe(void)
{
	lowcopy_caps *caps = block(sizeof(*caps));

	CHECK_EQ(lowcopy_probe(caps, sizeof(*caps)), 0);
	/* Each field where this layout says, holding this kernel's answer. */
	CHECK_EQ(caps->peek_off_tcp4, raw_has_peek_off(AF_INET, SOCK_STREAM, 0));
	CHECK_EQ(caps->peek_off_mptcp, raw_has_peek_off(AF_INET, SOCK_STREAM, IPPROTO_MPTCP));
	CHECK_EQ(caps->zerocopy_tcp, raw_has_so_zerocopy(AF_INET, SOCK_STREAM));
	CHECK_LATER_ZERO(caps);
	free(caps);
}

static void test_peeker_stats(void)
{
	lowcopy_peek_stats *st = block(sizeof(*st));
	lowcopy_peeker *p = NULL;
	char buf[8];
	int sock, peer;

	tcp_pair(AF_INET, 0, 0, &sock, &peer);
	send_all(peer, "hello world", 11);
	CHECK_EQ(lowcopy_peeker_new(sock, LOWCOPY_PEEK_OFFSET, &p), 0);
	CHECK_EQ(lowcopy_peeker_peek(p, buf, 5, 0), 5);
	CHECK_EQ(lowcopy_peeker_peek(p, buf, 6, 0), 6);
	CHECK_EQ(lowcopy_peeker_consume(p, 3), 3);
	CHECK_EQ(lowcopy_peeker_stats(p, st, sizeof(*st)), 0);
	CHECK_EQ(st->peeks, 2);
	CHECK_EQ(st->bytes_peeked, 11);
	CHECK_EQ(st->bytes_skipped_copied, 0);
	CHECK_EQ(st->bytes_consumed, 3);
	CHECK(st->syscalls >= 3);
	CHECK_LATER_ZERO(st);
	/* Sizes outside the rule's range are refused, nothing written. */
	memset(st, 0xa5, sizeof(*st));
	CHECK_EQ(lowcopy_peeker_stats(p, st, LOWCOPY_STRUCT_SIZE_MIN - 1), -EINVAL);
	CHECK_EQ(lowcopy_peeker_stats(p, st, LOWCOPY_STRUCT_SIZE_MAX + 1), -EINVAL);
	CHECK_EQ(st->peeks, 0xa5a5a5a5a5a5a5a5ULL);
	lowcopy_peeker_free(p);
	close(sock);
	close(peer);
	free(st);
}

/* Completions come back strided by the program's sizeof, more than one internal batch (64)
 * of them, with the program's user_data and the bytes each send accepted. */
static void test_completions(void)
{
	enum { SENDS = 150 };
	lowcopy_zc_completion *out = block(SENDS * sizeof(*out));
	lowcopy_zc_send_stats *st = block(sizeof(*st));
	char data[SENDS + 1] = { 0 };
	struct iovec iov = { data, 1 };
	lowcopy_zc *z = NULL;
	size_t k = 99, total = 0;
	int tx, rx, ok = 1;

	tcp_pair(AF_INET, 0, 0, &rx, &tx);
	CHECK_EQ(lowcopy_zc_new(tx, LOWCOPY_ZC_COPY, 0, &z), 0);
	/* send_reap: the copy backend's completion is ready when the send returns. */
	CHECK_EQ(lowcopy_zc_send_reap(z, &iov, 1, 0, 1000, out, 1, sizeof(*out), &k), 1);
	CHECK_EQ(k, 1);
	CHECK_EQ(out[0].user_data, 1000);
	CHECK_EQ(out[0].result, 1);
	CHECK_LATER_ZERO(&out[0]);
	for (int i = 1; i <= SENDS; i++) {
		CHECK_EQ(lowcopy_zc_send(z, data, i, 0, 1000 + i), i);
		total += i;
	}
	memset(out, 0xa5, SENDS * sizeof(*out));
	/* cap 0 with NULL, and an array no memory can hold, are refused before anything. */
	CHECK_EQ(lowcopy_zc_reap(z, NULL, 0, sizeof(*out)), 0);
	CHECK_EQ(lowcopy_zc_reap(z, out, SIZE_MAX / 8, 16), -EINVAL);
	CHECK_EQ(lowcopy_zc_reap(z, out, SENDS, 4), -EINVAL);
	CHECK_EQ(lowcopy_zc_reap(z, out, SENDS, sizeof(*out)), SENDS);
	for (int i = 0; i < SENDS; i++) {
		ok &= out[i].user_data == (uint64_t)(1001 + i) && out[i].result == i + 1;
#ifdef LAYOUT_NEWER
		ok &= out[i].lowcopy_test_later == 0;
#endif
	}
	CHECK(ok);
	CHECK_EQ(lowcopy_zc_reap(z, out, SENDS, sizeof(*out)), 0);
	CHECK_EQ(lowcopy_zc_stats(z, st, sizeof(*st)), 0);
	CHECK_EQ(st->sends, SENDS + 1);
	CHECK_EQ(st->bytes, total + 1);
	CHECK_EQ(st->completions, SENDS + 1);
	CHECK_EQ(st->copy_sends, SENDS + 1);
	CHECK_LATER_ZERO(st);
	CHECK_EQ(lowcopy_zc_free(z), 0);
	close(tx);
	close(rx);
	free(out);
	free(st);
}

/* In/out: the counters the program has are read, added to and written back; a field past the
 * library's struct keeps the program's value. */
static void test_recv_stats(void)
{
	lowcopy_recv_stats *rs = block(sizeof(*rs));
	char buf[100];
	int sock, peer;

	tcp_pair(AF_INET, 0, 0, &sock, &peer);
	memset(rs, 0, sizeof(*rs));
#ifdef LAYOUT_NEWER
	rs->lowcopy_test_later = 12345;
#endif
	for (int round = 1; round <= 2; round++) {
		send_all(peer, buf, 60);
		CHECK_EQ(lowcopy_recv_atleast_stats(sock, buf, sizeof(buf), 60, 2000, rs, sizeof(*rs)),
			 60);
		CHECK_EQ(rs->calls, round);
		CHECK(rs->syscalls >= (uint64_t)round);
	}
#ifdef LAYOUT_NEWER
	CHECK_EQ(rs->lowcopy_test_later, 12345);
	CHECK_EQ(rs->bytes, 120);
#endif
	close(sock);
	close(peer);
	free(rs);
}

/* The stateful receiver's counters: out only. */
static void test_receiver_stats(void)
{
	lowcopy_recv_stats *rs = block(sizeof(*rs));
	lowcopy_receiver *rcv = NULL;
	char buf[100];
	int sock, peer;

	tcp_pair(AF_INET, 0, 0, &sock, &peer);
	CHECK_EQ(lowcopy_receiver_new(sock, &rcv), 0);
	send_all(peer, buf, 40);
	CHECK_EQ(lowcopy_receiver_recv(rcv, buf, sizeof(buf), 40, 2000), 40);
	CHECK_EQ(lowcopy_receiver_stats(rcv, rs, sizeof(*rs)), 0);
	CHECK_EQ(rs->calls, 1);
	CHECK(rs->syscalls >= 2);
	CHECK_LATER_ZERO(rs);
	lowcopy_receiver_free(rcv);
	close(sock);
	close(peer);
	free(rs);
}

static void test_zcrx(void)
{
	lowcopy_zcrx_chunk *ch = block(sizeof(*ch));
	lowcopy_zcrx_recv_stats *st = block(sizeof(*st));
	unsigned char data[3000];
	lowcopy_zcrx *r = NULL;
	size_t got = 0;
	ssize_t n;
	int sock, peer, ok = 1;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = pattern_byte(i);
	tcp_pair(AF_INET, 0, 0, &sock, &peer);
	send_all(peer, data, sizeof(data));
	shutdown(peer, SHUT_WR);
	CHECK_EQ(lowcopy_zcrx_new(sock, 65536, &r), 0);
	while ((n = lowcopy_zcrx_recv(r, ch, sizeof(*ch), 0)) > 0) {
		ok &= (size_t)n == ch->len && got + n <= sizeof(data) &&
		      memcmp(ch->data, data + got, n) == 0;
		got += n;
	}
	CHECK_EQ(n, 0);
	CHECK(ok);
	CHECK_EQ(got, sizeof(data));
	CHECK(ch->data == NULL && ch->len == 0);
	CHECK_LATER_ZERO(ch);
	CHECK_EQ(lowcopy_zcrx_stats(r, st, sizeof(*st)), 0);
	CHECK_EQ(st->bytes_mapped + st->bytes_copied, sizeof(data));
	CHECK_LATER_ZERO(st);
	lowcopy_zcrx_free(r);
	close(sock);
	close(peer);
	free(ch);
	free(st);
}

/* The options struct both ways: lowcopy_zc_options_default fills exactly the program's struct
 * (older: no max_pending; newer: its extra field reads 0), and lowcopy_zc_new_opts takes it
 * (older: max_pending takes its default; newer: the unknown field, 0, is fine). */
static void test_zc_options(void)
{
	lowcopy_zc_options *o = block(sizeof(*o));
	lowcopy_zc *z = NULL;
	int sock, peer;

	tcp_pair(AF_INET, 0, 0, &peer, &sock);
	CHECK_EQ(lowcopy_zc_options_default(o, sizeof(*o)), 0);
	CHECK_EQ(o->backend, LOWCOPY_ZC_AUTO);
	CHECK_EQ(o->reserve, LOWCOPY_ZC_DEFAULT_RESERVE);
#ifndef LAYOUT_OLDER
	CHECK_EQ(o->max_pending, LOWCOPY_ZC_MAX_PENDING);
#endif
	CHECK_LATER_ZERO(o);
	o->backend = LOWCOPY_ZC_COPY;
	o->reserve = 0;
	CHECK_EQ(lowcopy_zc_new_opts(sock, o, sizeof(*o), &z), 0);
	CHECK_EQ(lowcopy_zc_backend(z), LOWCOPY_ZC_COPY);
	/* max_pending is the default LOWCOPY_ZC_MAX_PENDING in both layouts. */
	for (int i = 0; i < 200; i++)
		CHECK_EQ(lowcopy_zc_send(z, "o", 1, 0, i), 1);
	CHECK_EQ(lowcopy_zc_free(z), 0);
	free(o);
	close(sock);
	close(peer);
}

int main(void)
{
	test_probe();
	test_peeker_stats();
	test_completions();
	test_recv_stats();
	test_receiver_stats();
	test_zcrx();
	test_zc_options();
	return check_summary(SUITE);
}
