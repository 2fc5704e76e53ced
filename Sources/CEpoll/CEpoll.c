#define _GNU_SOURCE
#include "CEpoll.h"
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <errno.h>
#include <time.h>

int cachet_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

static int control(int epfd, int op, int fd, uint32_t events, uint64_t token) {
    struct epoll_event event;
    event.events = events;
    event.data.u64 = token;
    return epoll_ctl(epfd, op, fd, &event);
}

int cachet_epoll_add(int epfd, int fd, uint32_t events, uint64_t token) {
    return control(epfd, EPOLL_CTL_ADD, fd, events, token);
}

int cachet_epoll_modify(int epfd, int fd, uint32_t events, uint64_t token) {
    return control(epfd, EPOLL_CTL_MOD, fd, events, token);
}

int cachet_epoll_remove(int epfd, int fd) {
    struct epoll_event event = {0};
    return epoll_ctl(epfd, EPOLL_CTL_DEL, fd, &event);
}

int cachet_epoll_wait(int epfd, struct epoll_event *events, int capacity, int timeout_ms) {
    return epoll_wait(epfd, events, capacity, timeout_ms);
}

int cachet_epoll_wait_ns(int epfd, struct epoll_event *events, int capacity, long timeout_ns) {
#ifdef SYS_epoll_pwait2
    struct timespec timeout = { .tv_sec = timeout_ns / 1000000000L, .tv_nsec = timeout_ns % 1000000000L };
    long result = syscall(SYS_epoll_pwait2, epfd, events, capacity, &timeout, NULL, 0);
    if (result >= 0 || errno != ENOSYS) return (int)result;
#endif
    return epoll_wait(epfd, events, capacity, (int)((timeout_ns + 999999L) / 1000000L));
}

struct epoll_event *cachet_epoll_events_create(int capacity) {
    return calloc((size_t)capacity, sizeof(struct epoll_event));
}

void cachet_epoll_events_free(struct epoll_event *events) { free(events); }

uint32_t cachet_epoll_event_mask(const struct epoll_event *events, int index) { return events[index].events; }

uint64_t cachet_epoll_event_token(const struct epoll_event *events, int index) { return events[index].data.u64; }

int cachet_accept_nonblocking(int fd) { return accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC); }

long cachet_send(int fd, const void *buffer, unsigned long length) {
    return (long)send(fd, buffer, length, MSG_NOSIGNAL);
}
