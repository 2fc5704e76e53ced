#ifndef CACHET_CEPOLL_H
#define CACHET_CEPOLL_H

// Thin shims over Linux epoll, eventfd, a few socket calls and the thread's timer slack, which Swift's
// Glibc module does not export or cannot import cleanly (epoll_event is a packed struct on x86_64).

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <stdint.h>

/// Event masks, as plain integers.
static const uint32_t cachet_EPOLLIN = EPOLLIN;
static const uint32_t cachet_EPOLLOUT = EPOLLOUT;
static const uint32_t cachet_EPOLLERR = EPOLLERR;
static const uint32_t cachet_EPOLLHUP = EPOLLHUP;
static const uint32_t cachet_EPOLLRDHUP = EPOLLRDHUP;
static const uint32_t cachet_EPOLLET = EPOLLET;

/// Creates an epoll descriptor with EPOLL_CLOEXEC. Returns -1 and sets errno on failure.
int cachet_epoll_create(void);

/// Adds, modifies or removes `fd` with the given event mask; `token` comes back with every event.
int cachet_epoll_add(int epfd, int fd, uint32_t events, uint64_t token);
int cachet_epoll_modify(int epfd, int fd, uint32_t events, uint64_t token);
int cachet_epoll_remove(int epfd, int fd);

/// Waits for events. `events` is an opaque array of `capacity` elements made by `cachet_epoll_events_create`.
int cachet_epoll_wait(int epfd, struct epoll_event *events, int capacity, int timeout_ms);

/// Waits for events at most `timeout_ns` nanoseconds (epoll_pwait2), for timeouts finer than a millisecond.
int cachet_epoll_wait_ns(int epfd, struct epoll_event *events, int capacity, long long timeout_ns);

/// Sets the calling thread's timer slack (how late the kernel may end its timed waits), in nanoseconds.
void cachet_set_timer_slack_ns(unsigned long slack_ns);

/// Allocates and frees an event array (so that Swift never lays out the packed struct itself).
struct epoll_event *cachet_epoll_events_create(int capacity);
void cachet_epoll_events_free(struct epoll_event *events);

/// Reads one event of the array. Inline: called twice per event on the loop's hot path, where a call each
/// cost a measurable share of the dispatch (BENCHMARKS.md, "Figures behind choices in the code").
static inline uint32_t cachet_epoll_event_mask(const struct epoll_event *events, int index) {
    return events[index].events;
}
static inline uint64_t cachet_epoll_event_token(const struct epoll_event *events, int index) {
    return events[index].data.u64;
}

/// An eventfd (non-blocking, close-on-exec) for waking a thread blocked in epoll_wait. Returns -1 and sets
/// errno on failure.
int cachet_eventfd_create(void);

/// Makes the eventfd readable (adds 1 to its counter).
void cachet_eventfd_signal(int fd);

/// Resets the eventfd's counter, so that it is no longer readable until signalled again.
void cachet_eventfd_reset(int fd);

/// accept4 with SOCK_NONBLOCK | SOCK_CLOEXEC.
int cachet_accept_nonblocking(int fd);

/// Sends with MSG_NOSIGNAL.
long cachet_send(int fd, const void *buffer, unsigned long length);

#endif
