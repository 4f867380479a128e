/* daemon_min.c - the peek calls a sandboxed daemon makes (issue 22): a static table of peeker
 * storage, init with the kind stated, peekv_at at its own offset, consume, release CLOSING.
 * tests/footprint/measure.sh links it against liblowcopy.a and reports what lowcopy adds. */
#include <lowcopy.h>
#include <sys/socket.h>
#include <sys/uio.h>

static lowcopy_peeker_storage table[4];

int main(int argc, char **argv)
{
    lowcopy_peeker *p;
    char buf[64];
    struct iovec iov = {buf, sizeof buf};
    lowcopy_peek_result res;
    (void)argv;
    if (lowcopy_peeker_init(&table[0], sizeof table[0], argc, LOWCOPY_PEEK_OFFSET_OR_DISCARD,
                            AF_INET, 0, &p))
        return 1;
    lowcopy_peeker_peekv_at(p, 0, &iov, 1, MSG_DONTWAIT, &res, sizeof res);
    lowcopy_peeker_consume(p, 1);
    return lowcopy_peeker_release(p, LOWCOPY_RELEASE_CLOSING) ? 1 : 0;
}
