#define _GNU_SOURCE
#include "CEpoll.h"
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <errno.h>
#include <sys/prctl.h>
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

int cachet_epoll_wait_ns(int epfd, struct epoll_event *events, int capacity, long long timeout_ns) {
    struct timespec timeout = {.tv_sec = timeout_ns / 1000000000LL, .tv_nsec = timeout_ns % 1000000000LL};
    return epoll_pwait2(epfd, events, capacity, &timeout, NULL);
}

void cachet_set_timer_slack_ns(unsigned long slack_ns) { prctl(PR_SET_TIMERSLACK, slack_ns, 0, 0, 0); }

int cachet_eventfd_create(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

void cachet_eventfd_signal(int fd) {
    uint64_t one = 1;
    ssize_t written;
    do { written = write(fd, &one, sizeof one); } while (written < 0 && errno == EINTR);
}

void cachet_eventfd_reset(int fd) {
    uint64_t value;
    ssize_t got;
    do { got = read(fd, &value, sizeof value); } while (got < 0 && errno == EINTR);
}

struct epoll_event *cachet_epoll_events_create(int capacity) {
    return calloc((size_t)capacity, sizeof(struct epoll_event));
}

void cachet_epoll_events_free(struct epoll_event *events) { free(events); }

int cachet_accept_nonblocking(int fd) { return accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC); }

long cachet_send(int fd, const void *buffer, unsigned long length) {
    return (long)send(fd, buffer, length, MSG_NOSIGNAL);
}
