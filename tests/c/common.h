/* common.h - what the ABI tests (test_*.c, through check.h) and the table runners (through
 * harness.h) both need. Header-only, so that a test still builds from its one .c file
 * (scripts/test.sh compiles test_abi.c alone against an installed lowcopy). */
#ifndef LOWCOPY_TESTS_COMMON_H
#define LOWCOPY_TESTS_COMMON_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

/* Linux constants that older libc headers lack; the values are the kernel's ABI. */
#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif
#ifndef SO_PEEK_OFF
#define SO_PEEK_OFF 42
#endif
#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

/* Byte at stream position p of the test pattern, the same everywhere (common::pattern_byte in
 * the Rust tests): a byte out of place or a lost or repeated chunk shows as a wrong value. */
static inline unsigned char pattern_byte(uint64_t p)
{
    return (unsigned char)((p * 131 + 7) % 251);
}

/* The loopback address of `family` (AF_INET or AF_INET6), port 0; returns its length. */
static inline socklen_t loopback(int family, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        return sizeof *a;
    }
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sizeof *a;
}

#endif
