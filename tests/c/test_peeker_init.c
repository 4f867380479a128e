/*
 * Peekers in caller memory (issue 11): lowcopy_peeker_init with a stated socket kind, the
 * offset peek on the handle (lowcopy_peeker_peek_at / peekv_at and lowcopy_peek_result), and
 * lowcopy_peeker_release. Counts every allocation the library makes after start-up through
 * AddressSanitizer's malloc hook: init, the peeks (both mechanisms, the discard path's wait
 * included) and release must make none. Built twice (liblowcopy.so and liblowcopy.a) under
 * AddressSanitizer by the Makefile. Prints "c-peeker-init: N passed, M failed".
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdint.h>
#include <sys/uio.h>

/* AddressSanitizer's allocator hooks (sanitizer/allocator_interface.h, which gcc does not
 * always install): called for every allocation and free the process makes. */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
					      void (*free_hook)(const volatile void *));

#include <lowcopy.h>

#include "check.h"

/* Allocations (malloc, calloc, realloc, aligned ones: ASan reports them all here) since the
 * last reset, by any thread. */
static volatile unsigned long allocs;

static void on_malloc(const volatile void *p, size_t n)
{
	(void)p;
	(void)n;
	__atomic_add_fetch(&allocs, 1, __ATOMIC_RELAXED);
}

static void on_free(const volatile void *p)
{
	(void)p;
}

static void send_str(int fd, const char *s)
{
	if (write(fd, s, strlen(s)) != (ssize_t)strlen(s))
		die("write");
	usleep(20000);
}

static lowcopy_peeker_storage store[4];

static void test_argument_checks(int sock)
{
	lowcopy_peeker *p = (lowcopy_peeker *)0x1;
	alignas(8) unsigned char big[LOWCOPY_PEEKER_SIZE + 8];

	CHECK(lowcopy_peeker_size() > 0);
	/* The header promises exactly what the library needs (issue 22.2). */
	CHECK_EQ(lowcopy_peeker_size(), LOWCOPY_PEEKER_SIZE);
	CHECK_EQ(sizeof(lowcopy_peeker_storage), LOWCOPY_PEEKER_SIZE);
	CHECK_EQ(_Alignof(lowcopy_peeker_storage) % LOWCOPY_PEEKER_ALIGN, 0);
	CHECK_EQ(lowcopy_peeker_init(NULL, LOWCOPY_PEEKER_SIZE, sock, LOWCOPY_PEEK_AUTO, AF_INET,
				     IPPROTO_TCP, &p), -EINVAL);
	CHECK_EQ(lowcopy_peeker_init(&store[0], sizeof store[0], sock, LOWCOPY_PEEK_AUTO, AF_INET,
				     IPPROTO_TCP, NULL), -EINVAL);
	CHECK_EQ(lowcopy_peeker_init(&store[0], lowcopy_peeker_size() - 1, sock, LOWCOPY_PEEK_AUTO,
				     AF_INET, IPPROTO_TCP, &p), -EINVAL);
	CHECK_EQ(lowcopy_peeker_init(big + 1, LOWCOPY_PEEKER_SIZE, sock, LOWCOPY_PEEK_AUTO, AF_INET,
				     IPPROTO_TCP, &p), -EINVAL); /* misaligned */
	CHECK_EQ(lowcopy_peeker_init(&store[0], sizeof store[0], sock, 7, AF_INET, IPPROTO_TCP, &p),
		 -EINVAL);
	CHECK_EQ(lowcopy_peeker_init(&store[0], sizeof store[0], sock, LOWCOPY_PEEK_AUTO, AF_INET,
				     IPPROTO_UDP, &p), -EINVAL);
	CHECK_EQ(lowcopy_peeker_init(&store[0], sizeof store[0], sock, LOWCOPY_PEEK_AUTO, AF_UNIX,
				     IPPROTO_TCP, &p), -EINVAL);
	CHECK_EQ(lowcopy_peeker_init(&store[0], sizeof store[0], -1, LOWCOPY_PEEK_AUTO, AF_INET,
				     IPPROTO_TCP, &p), -EBADF);
	CHECK_EQ(lowcopy_peeker_init(&store[0], sizeof store[0], 1000000, LOWCOPY_PEEK_OFFSET,
				     AF_INET, IPPROTO_TCP, &p), -EBADF);
	/* AF_UNSPEC: the socket is asked, and a file is not one. */
	int file = open("/proc/self/stat", O_RDONLY);
	if (file < 0)
		die("open");
	CHECK_EQ(lowcopy_peeker_init(&store[0], sizeof store[0], file, LOWCOPY_PEEK_AUTO, AF_UNSPEC,
				     0, &p), -ENOTSOCK);
	close(file);
	CHECK(p == (lowcopy_peeker *)0x1); /* *out untouched on every error */
	/* A heap block of exactly lowcopy_peeker_size() bytes (ASan: a byte written past it is a
	 * report) holds a peeker; its tag says live, then released; the block stays the caller's. */
	uint64_t *exact = block(lowcopy_peeker_size());
	CHECK_EQ(lowcopy_peeker_init(exact, lowcopy_peeker_size(), sock, LOWCOPY_PEEK_DISCARD, AF_INET,
				     IPPROTO_TCP, &p), 0);
	CHECK(p == (lowcopy_peeker *)exact);
	CHECK(exact[0] == LOWCOPY_PEEKER_LIVE);
	CHECK_EQ(lowcopy_peeker_release(p, LOWCOPY_RELEASE_CLOSING), 0);
	CHECK(exact[0] == LOWCOPY_PEEKER_RELEASED);
	free(exact);
	p = (lowcopy_peeker *)0x1;
	CHECK_EQ(lowcopy_peeker_release(NULL, 0), -EINVAL);
	lowcopy_peeker_free(NULL);
	CHECK_EQ(lowcopy_peeker_peekv_at(NULL, 0, NULL, 1, 0, NULL, 0), -EINVAL);
}

/* The offset peek's costs and result on SO_PEEK_OFF, as a daemon keeps its offsets. */
static void test_offset_peek(int family)
{
	int sock, peer;
	lowcopy_peeker *p = NULL;
	lowcopy_peek_result res;
	lowcopy_peek_stats st;
	char buf[4];

	tcp_pair(family, IPPROTO_TCP, 0, &sock, &peer);
	send_str(peer, "0123456789abcdef");
	__atomic_store_n(&allocs, 0, __ATOMIC_RELAXED);
	CHECK_EQ(lowcopy_peeker_init(&store[1], sizeof store[1], sock, LOWCOPY_PEEK_OFFSET, family,
				     IPPROTO_TCP, &p), 0);
	CHECK(p == (lowcopy_peeker *)&store[1]);
	CHECK_EQ(lowcopy_peeker_stats(p, &st, sizeof st), 0);
	/* TCP_INFO (the stated kind checked: TCP, not listening), SO_PEEK_OFF = 0 and SO_OOBINLINE
	 * (urgent data); no classification */
	CHECK_EQ(st.syscalls, 3);
	CHECK_EQ(lowcopy_peeker_mode(p), LOWCOPY_PEEK_OFFSET);
	CHECK_EQ(get_int(sock, SOL_SOCKET, SO_PEEK_OFF), 0);

	memset(&res, 0xa5, sizeof res);
	CHECK_EQ(lowcopy_peeker_peek_at(p, 0, buf, 4, MSG_DONTWAIT, &res, sizeof res), 4);
	CHECK(!memcmp(buf, "0123", 4));
	CHECK_EQ(res.len, 4);
	CHECK_EQ(res.offset, 0);
	CHECK_EQ(res.stream_pos, 0);
	CHECK_EQ(res.syscalls, 1);
	CHECK_EQ(res.flags, 0);
	/* Where the kernel's offset is: one syscall. */
	CHECK_EQ(lowcopy_peeker_peek_at(p, 4, buf, 4, MSG_DONTWAIT, &res, sizeof res), 4);
	CHECK(!memcmp(buf, "4567", 4));
	CHECK_EQ(res.syscalls, 1);
	/* A retransmission from 1: moved first, two syscalls. */
	struct iovec iov[2] = {{buf, 1}, {buf + 1, 2}};
	CHECK_EQ(lowcopy_peeker_peekv_at(p, 1, iov, 2, MSG_DONTWAIT, &res, sizeof res), 3);
	CHECK(!memcmp(buf, "123", 3));
	CHECK_EQ(res.syscalls, 2);
	CHECK_EQ(res.flags, LOWCOPY_PEEK_MOVED);
	CHECK_EQ(lowcopy_peeker_offset(p), 4);
	/* The peer acknowledged 4 bytes: the kernel's offset drops by 4 (to 0), and so does the
	 * daemon's offset of byte 4: one syscall, stream position 4. */
	CHECK_EQ(lowcopy_peeker_consume(p, 4), 4);
	CHECK_EQ(lowcopy_peeker_peek_at(p, 0, buf, 4, MSG_DONTWAIT, &res, sizeof res), 4);
	CHECK(!memcmp(buf, "4567", 4));
	CHECK_EQ(res.stream_pos, 4);
	CHECK_EQ(res.syscalls, 1);
	/* A shorter result struct (an older header): only its bytes are written. */
	alignas(8) unsigned char small[16];
	uint64_t len8;
	memset(small, 0xee, sizeof small);
	CHECK_EQ(lowcopy_peeker_peek_at(p, 4, buf, 4, MSG_DONTWAIT, (lowcopy_peek_result *)small,
					8), 4);
	memcpy(&len8, small, 8);
	CHECK_EQ(len8, 4);
	CHECK_EQ(small[8], 0xee);
	CHECK_EQ(lowcopy_peeker_peek_at(p, 0, buf, 4, 0, &res, 2), -EINVAL);
	/* No result wanted. */
	CHECK_EQ(lowcopy_peeker_peek_at(p, 8, buf, 4, MSG_DONTWAIT, NULL, 0), 4);
	CHECK(!memcmp(buf, "cdef", 4));
	CHECK_EQ(lowcopy_peeker_peek_at(p, 12, buf, 4, MSG_DONTWAIT, &res, sizeof res), -EAGAIN);
	CHECK_EQ(lowcopy_peeker_offset(p), 12);
	CHECK_EQ(lowcopy_peeker_peek_at(p, (size_t)INT32_MAX + 1, buf, 4, MSG_DONTWAIT, NULL, 0),
		 -EOVERFLOW);
	CHECK_EQ(lowcopy_peeker_peek_at(p, 0, NULL, 4, MSG_DONTWAIT, NULL, 0), -EINVAL);
	CHECK_EQ(lowcopy_peeker_peek_at(p, 0, buf, 4, MSG_MORE, NULL, 0), -EINVAL);
	/* Release before close: nothing restored, no syscall. */
	CHECK_EQ(lowcopy_peeker_set_lowat_armed(p, 1), 0);
	CHECK_EQ(lowcopy_peeker_release(p, 2), -EINVAL); /* unknown flag: not released */
	CHECK_EQ(lowcopy_peeker_release(p, LOWCOPY_RELEASE_CLOSING), 0);
	CHECK_EQ(get_int(sock, SOL_SOCKET, SO_PEEK_OFF), 12);
	CHECK_EQ(__atomic_load_n(&allocs, __ATOMIC_RELAXED), 0);
	close(sock);
	close(peer);
}

/* The same memory again, through the discard prefix, with a blocking peek that has to wait
 * for a byte beyond the offset (the discard mechanism's wait path); free restores. */
static volatile int later_running;

static void *later(void *arg)
{
	__atomic_store_n(&later_running, 1, __ATOMIC_RELEASE);
	usleep(50000);
	send_str(*(int *)arg, "!");
	return NULL;
}

static void test_discard_and_reuse(void)
{
	int sock, peer;
	lowcopy_peeker *p = NULL;
	lowcopy_peek_result res;
	char buf[8];
	pthread_t t;

	tcp_pair(AF_INET, IPPROTO_TCP, 0, &sock, &peer);
	send_str(peer, "hello world");
	/* The thread's own start-up allocates (ASan, glibc): before the count starts. */
	if (pthread_create(&t, NULL, later, &peer))
		die("pthread_create");
	while (!__atomic_load_n(&later_running, __ATOMIC_ACQUIRE))
		usleep(1000);
	__atomic_store_n(&allocs, 0, __ATOMIC_RELAXED);
	for (int round = 0; round < 2; round++) {
		CHECK_EQ(lowcopy_peeker_init(&store[2], sizeof store[2], sock, LOWCOPY_PEEK_DISCARD,
					     AF_INET, 0, &p), 0);
		CHECK_EQ(lowcopy_peeker_peek_at(p, 6, buf, 5, 0, &res, sizeof res), 5);
		CHECK(!memcmp(buf, "world", 5));
		CHECK_EQ(res.syscalls, 1);
		CHECK_EQ(res.flags, LOWCOPY_PEEK_PREFIXED);
		if (round == 1) {
			/* Blocks until the thread's byte comes. */
			CHECK_EQ(lowcopy_peeker_peek_at(p, 11, buf, 8, 0, &res, sizeof res), 1);
			CHECK_EQ(buf[0], '!');
		}
		lowcopy_peeker_free(p); /* in place: store[2] stays ours, reused next round */
	}
	CHECK_EQ(__atomic_load_n(&allocs, __ATOMIC_RELAXED), 0);
	pthread_join(t, NULL);
	CHECK_EQ(get_int(sock, SOL_SOCKET, SO_PEEK_OFF), -1);
	close(sock);
	close(peer);
}

/* AUTO with the kind stated, and AF_UNIX; the heap peeker releases through release() too. */
static void test_auto_unix_and_heap(void)
{
	int sv[2];
	lowcopy_peeker *p = NULL, *h = NULL;
	lowcopy_peek_result res;
	char buf[4];

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		die("socketpair");
	send_str(sv[1], "abcdefgh");
	CHECK_EQ(lowcopy_peeker_init(&store[3], sizeof store[3], sv[0], LOWCOPY_PEEK_AUTO, AF_UNIX,
				     0, &p), 0);
	CHECK_EQ(lowcopy_peeker_peek_at(p, 2, buf, 3, MSG_DONTWAIT, &res, sizeof res), 3);
	CHECK(!memcmp(buf, "cde", 3));
	CHECK_EQ(lowcopy_peeker_consume(p, 2), 2);
	CHECK_EQ(lowcopy_peeker_peek_at(p, 3, buf, 3, MSG_DONTWAIT, &res, sizeof res), 3);
	CHECK(!memcmp(buf, "fgh", 3));
	CHECK_EQ(res.stream_pos, 5);
	CHECK_EQ(lowcopy_peeker_release(p, 0), 0);
	CHECK_EQ(get_int(sv[0], SOL_SOCKET, SO_PEEK_OFF), -1);
	/* The hook sees the library's allocations: lowcopy_peeker_new makes one, its handle. */
	__atomic_store_n(&allocs, 0, __ATOMIC_RELAXED);
	CHECK_EQ(lowcopy_peeker_new(sv[0], LOWCOPY_PEEK_OFFSET, &h), 0);
	CHECK_EQ(__atomic_load_n(&allocs, __ATOMIC_RELAXED), 1);
	CHECK_EQ(lowcopy_peeker_peek_at(h, 1, buf, 2, MSG_DONTWAIT, &res, sizeof res), 2);
	CHECK(!memcmp(buf, "de", 2));
	CHECK_EQ(lowcopy_peeker_release(h, LOWCOPY_RELEASE_CLOSING), 0);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	int sock, peer;

	__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
	tcp_pair(AF_INET, IPPROTO_TCP, 0, &sock, &peer);
	test_argument_checks(sock);
	close(sock);
	close(peer);
	test_offset_peek(AF_INET);
	test_offset_peek(AF_INET6);
	test_discard_and_reuse();
	test_auto_unix_and_heap();
	return check_summary("c-peeker-init");
}
