//go:build linux

package producer

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sendRing is an io_uring of non-blocking socket sends: a direct writer's whole turn (one frame
// for each of a thousand readers) goes to the kernel in one system call instead of one write(2)
// per reader. On this project's 2-core machine a write(2) of an 80-byte frame to a loopback
// socket cost 7–9 µs of CPU and a send through the ring 4–5.5 (BenchmarkSendRing; a C
// program agreed): the work per send stays, the crossing per send goes.
//
// No io_uring library resolves through the module proxy this project builds with, so this is
// the small part of one it needs: set-up, a submission queue of IORING_OP_SEND entries, and
// reaping their completions, for one goroutine at a time (a writer's). The sends carry
// MSG_DONTWAIT, so each completes at submission (a full socket answers EAGAIN rather than
// arming a poll), and MSG_NOSIGNAL (a closed peer is EPIPE, not a signal).
type sendRing struct {
	fd      int
	entries uint32
	sqMem   []byte
	cqMem   []byte
	sqeMem  []byte
	sqTail  *uint32
	sqMask  uint32
	sqArray []uint32
	sqes    []uringSQE
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    []uringCQE
	queued  uint32 // entries filled since the last submit
}

// uringSQE is struct io_uring_sqe (64 bytes), as far as a send uses it.
type uringSQE struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	msgFlags    uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFdIn  int32
	addr3       uint64
	_           uint64
}

// uringCQE is struct io_uring_cqe (16 bytes).
type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

// uringParams is struct io_uring_params (120 bytes).
type uringParams struct {
	sqEntries    uint32
	cqEntries    uint32
	flags        uint32
	sqThreadCPU  uint32
	sqThreadIdle uint32
	features     uint32
	wqFd         uint32
	resv         [3]uint32
	sqOff        struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

const (
	uringOpSend           = 26 // IORING_OP_SEND
	uringEnterGetEvents   = 1  // IORING_ENTER_GETEVENTS
	uringOffSQRing        = 0
	uringOffCQRing        = 0x8000000
	uringOffSQEs          = 0x10000000
	uringSendFlags        = unix.MSG_DONTWAIT | unix.MSG_NOSIGNAL
	uringSQESize          = 64
	uringCQESize          = 16
	uringParamsSize       = 120
	uringDefaultEntries   = 256
	uringSetupSubmitAll   = 1 << 7 // IORING_SETUP_SUBMIT_ALL: one bad entry does not stop the rest
	uringSetupCoopTaskrun = 1 << 8
)

var _ = [1]struct{}{}[unsafe.Sizeof(uringSQE{})-uringSQESize]
var _ = [1]struct{}{}[unsafe.Sizeof(uringCQE{})-uringCQESize]
var _ = [1]struct{}{}[unsafe.Sizeof(uringParams{})-uringParamsSize]

// errNoRing is a ring the kernel would not set up (io_uring disabled, or filtered by seccomp,
// as container runtimes' default profiles do).
var errNoRing = errors.New("producer: io_uring is not available")

func newSendRing(entries uint32) (*sendRing, error) {
	var p uringParams
	p.flags = uringSetupSubmitAll | uringSetupCoopTaskrun
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno == syscall.EINVAL {
		// A kernel older than the flags (5.18/5.19): set up without them.
		p = uringParams{}
		fd, _, errno = unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	}
	if errno != 0 {
		return nil, fmt.Errorf("%w: io_uring_setup: %w", errNoRing, errno)
	}
	r := &sendRing{fd: int(fd), entries: p.sqEntries}
	fail := func(err error) (*sendRing, error) {
		r.close()
		return nil, fmt.Errorf("%w: %w", errNoRing, err)
	}
	var err error
	sqSize := int(p.sqOff.array) + int(p.sqEntries)*4
	if r.sqMem, err = unix.Mmap(r.fd, uringOffSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fail(err)
	}
	cqSize := int(p.cqOff.cqes) + int(p.cqEntries)*uringCQESize
	if r.cqMem, err = unix.Mmap(r.fd, uringOffCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fail(err)
	}
	if r.sqeMem, err = unix.Mmap(r.fd, uringOffSQEs, int(p.sqEntries)*uringSQESize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fail(err)
	}
	u32 := func(mem []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
	r.sqTail = u32(r.sqMem, p.sqOff.tail)
	r.sqMask = *u32(r.sqMem, p.sqOff.ringMask)
	r.sqArray = unsafe.Slice(u32(r.sqMem, p.sqOff.array), p.sqEntries)
	r.sqes = unsafe.Slice((*uringSQE)(unsafe.Pointer(&r.sqeMem[0])), p.sqEntries)
	r.cqHead, r.cqTail = u32(r.cqMem, p.cqOff.head), u32(r.cqMem, p.cqOff.tail)
	r.cqMask = *u32(r.cqMem, p.cqOff.ringMask)
	r.cqes = unsafe.Slice((*uringCQE)(unsafe.Pointer(&r.cqMem[p.cqOff.cqes])), p.cqEntries)
	// The array maps ring slots to entries one to one, once and for all.
	for i := range r.sqArray {
		r.sqArray[i] = uint32(i)
	}
	return r, nil
}

// free is how many more sends fit before the next submit.
func (r *sendRing) free() int { return int(r.entries - r.queued) }

// send queues a send of b to fd, tagged with user. b must stay as it is until submit returns.
func (r *sendRing) send(fd int, b []byte, user uint64) {
	tail := atomic.LoadUint32(r.sqTail) + r.queued
	e := &r.sqes[tail&r.sqMask]
	*e = uringSQE{opcode: uringOpSend, fd: int32(fd), addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))), len: uint32(len(b)), msgFlags: uringSendFlags, userData: user}
	r.queued++
}

// submit hands the queued sends to the kernel, waits for all of them and calls done with each
// one's tag and result (bytes sent, or -errno). The buffers the sends named may be reused once
// it returns. An error means the ring cannot be used any more: the sends done has not been
// called for are in an unknown state, which the caller must treat as failed.
func (r *sendRing) submit(done func(user uint64, res int32)) error {
	n := r.queued
	if n == 0 {
		return nil
	}
	atomic.StoreUint32(r.sqTail, atomic.LoadUint32(r.sqTail)+n)
	r.queued = 0
	toSubmit := n
	for left := n; left > 0; {
		m, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), uintptr(left), uringEnterGetEvents, 0, 0)
		switch errno {
		case 0:
			toSubmit -= min(toSubmit, uint32(m))
		case syscall.EINTR, syscall.EAGAIN, syscall.EBUSY:
		default:
			return fmt.Errorf("io_uring_enter: %w", errno)
		}
		head, tail := atomic.LoadUint32(r.cqHead), atomic.LoadUint32(r.cqTail)
		for ; head != tail; head++ {
			c := &r.cqes[head&r.cqMask]
			done(c.userData, c.res)
			left--
		}
		atomic.StoreUint32(r.cqHead, head)
	}
	return nil
}

func (r *sendRing) close() {
	for _, m := range [][]byte{r.sqeMem, r.cqMem, r.sqMem} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	r.sqeMem, r.cqMem, r.sqMem = nil, nil, nil
	if r.fd > 0 {
		_ = unix.Close(r.fd)
		r.fd = -1
	}
}
