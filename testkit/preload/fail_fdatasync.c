/* An LD_PRELOAD library for tests: makes chosen fdatasync(2) calls on the sink's log segments
 * fail, so a test can break the real `dlq` binary's disk the way a failing device would.
 *
 *   DLQ_FAIL_FDATASYNC_NTH    comma-separated 1-based numbers of the fdatasync calls to fail,
 *                             counting only calls on files whose path ends in ".seg" and
 *                             contains "/log/" (the segment log); e.g. "3" or "2,3"
 *   DLQ_FAIL_FDATASYNC_ERRNO  the errno to fail with (default 5, EIO)
 *
 * Every other call goes to the real fdatasync. Built by dlq_testkit::fail_sync at test time
 * (cc -shared -fPIC), never shipped. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned long seen = 0;

static int is_segment(int fd) {
    char link[64];
    char path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
    size_t len = (size_t)n;
    return len > 4 && strcmp(path + len - 4, ".seg") == 0 && strstr(path, "/log/") != NULL;
}

static int chosen(unsigned long number) {
    const char *list = getenv("DLQ_FAIL_FDATASYNC_NTH");
    if (list == NULL) return 0;
    while (*list) {
        char *end;
        unsigned long want = strtoul(list, &end, 10);
        if (end == list) return 0;
        if (want == number) return 1;
        list = (*end == ',') ? end + 1 : end;
        if (*end != ',' && *end != '\0') return 0;
    }
    return 0;
}

int fdatasync(int fd) {
    static int (*real)(int) = NULL;
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    if (is_segment(fd)) {
        unsigned long number = __atomic_add_fetch(&seen, 1, __ATOMIC_SEQ_CST);
        if (chosen(number)) {
            const char *code = getenv("DLQ_FAIL_FDATASYNC_ERRNO");
            errno = code ? atoi(code) : EIO;
            return -1;
        }
    }
    return real(fd);
}
