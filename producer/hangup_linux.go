package producer

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
)

// hangups watches direct readers' sockets for the client's hang-up with one epoll instance of
// its own (beside the runtime's, which owns the sockets for I/O): a socket is added for
// EPOLLRDHUP alone, so a client's bytes never wake it, and its end (EPOLLRDHUP, EPOLLHUP or
// EPOLLERR) finishes the reader. One goroutine waits for all of them, so a waiting reader
// holds none.
type hangups struct {
	epfd int
	wake [2]int // a pipe: its read end is in the set, and a byte on it stops run

	mu      sync.Mutex
	next    uint32
	readers map[uint32]*directReader
}

// stopToken is the pipe's key in the set (readers' keys start at 1 and skip it).
const stopToken = 0

func newHangups() (*hangups, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	h := &hangups{epfd: epfd, readers: map[uint32]*directReader{}}
	if err := syscall.Pipe2(h.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		_ = syscall.Close(epfd)
		return nil, err
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: stopToken}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, h.wake[0], &ev); err != nil {
		h.closeFDs()
		return nil, err
	}
	return h, nil
}

func (h *hangups) closeFDs() {
	_ = syscall.Close(h.wake[0])
	_ = syscall.Close(h.wake[1])
	_ = syscall.Close(h.epfd)
}

// watch adds r's socket to the set; false when it cannot (then the caller watches otherwise).
func (h *hangups) watch(r *directReader) bool {
	if h == nil || r.raw == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.readers == nil {
		return false // closed
	}
	for {
		h.next++
		if _, used := h.readers[h.next]; h.next != stopToken && !used {
			break
		}
	}
	token := h.next
	var added error
	if err := r.raw.Control(func(fd uintptr) {
		ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP, Fd: int32(token)}
		added = syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
	}); err != nil || added != nil {
		return false
	}
	r.token = token
	h.readers[token] = r
	return true
}

// forget takes r's socket out of the set, before its connection closes.
func (h *hangups) forget(r *directReader) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.readers == nil || r.token == 0 {
		return // stopped (the set is closed), or never watched here
	}
	if h.readers[r.token] == r {
		delete(h.readers, r.token)
		h.del(r)
	}
}

// del takes r's socket out of the set (h.mu held).
func (h *hangups) del(r *directReader) {
	_ = r.raw.Control(func(fd uintptr) {
		_ = syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
	})
}

// run finishes the readers whose clients hang up, until close.
func (h *hangups) run() {
	defer h.stopWatching()
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(h.epfd, events, -1)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return // not expected; the readers still end at their next failed write
		}
		var gone []*directReader
		h.mu.Lock()
		for _, ev := range events[:n] {
			token := uint32(ev.Fd)
			if token == stopToken {
				h.mu.Unlock()
				return
			}
			if r, ok := h.readers[token]; ok {
				// Out of the set now: the watch is level-triggered, and an owned reader ends
				// only at its owner's next turn.
				delete(h.readers, token)
				h.del(r)
				gone = append(gone, r)
			}
		}
		h.mu.Unlock()
		for _, r := range gone {
			r.hangUp(fmt.Errorf("%w (hang-up seen)", errClientGone))
		}
	}
}

// stopWatching closes the set; forget and watch see it closed.
func (h *hangups) stopWatching() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.readers = nil
	h.closeFDs()
}

// close stops run (which closes the descriptors). A set already stopped is left alone: its
// pipe's descriptor numbers may belong to other files by now.
func (h *hangups) close() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.readers != nil {
		_, _ = syscall.Write(h.wake[1], []byte{1})
	}
}
