package producer

import (
	"errors"
	"fmt"
	"syscall"
)

// ringOp is one reader's send in a writer's ring submission.
type ringOp struct {
	r      *directReader
	w      directWrite
	held   bool  // the reader's descriptor was held and its send queued
	err    error // the descriptor could not be held (the connection closed)
	res    int32 // the send's result: bytes sent, or -errno
	reaped bool  // res is set
}

// ringTurn is a writer's turn through its ring: each round gathers what every reader of the
// batch has ready (as writeFast would), sends it all in one submission, and then settles each
// reader as writeFast does after its write. A reader that still has frames after its send
// goes in the next round. buf is the writer's writeFast buffer (for the readers that take
// write(2)), returned as writeFast returns it.
func (sh *directShard) ringTurn(batch []*directReader, buf []byte) []byte {
	cur := sh.ringCur[:0]
	cur = append(cur, batch...)
	for len(cur) > 0 && sh.ring != nil {
		sh.ops = sh.ops[:0]
		sh.obuf = sh.obuf[:0]
		grew := 0
		next := sh.ringNext[:0]
		for i, r := range cur {
			if len(sh.ops) == sh.ring.free() {
				next = append(next, cur[i:]...)
				break
			}
			if r.raw == nil {
				// No descriptor to send to: writeFast hands it to a goroutine of its own.
				buf = r.writeFast(buf)
				continue
			}
			// Gather after what the readers before it gathered, so every send's bytes stay
			// as they are until the submission returns.
			at := sh.obuf[len(sh.obuf):]
			room := cap(at)
			w, ok := r.nextWrite(&at)
			if !ok {
				continue
			}
			if !w.rest {
				if len(w.b) <= room { // gathered in place: appends that fit never move
					sh.obuf = sh.obuf[:len(sh.obuf)+len(w.b)]
				} else {
					grew += len(w.b) // gathered into a buffer of its own: the shard's grows below
				}
			}
			sh.ops = append(sh.ops, ringOp{r: r, w: w})
		}
		if grew > 0 {
			sh.obuf = make([]byte, 0, 2*(cap(sh.obuf)+grew))
		}
		sh.submitOps()
		sent := uint64(0)
		for i := range sh.ops {
			op := &sh.ops[i]
			var n int
			var err error
			switch {
			case op.err != nil:
				err = op.err
			case !op.reaped:
				err = fmt.Errorf("%w: the send's outcome is unknown: %w", errRingFailed, sh.ringErr)
			case op.res >= 0:
				n = int(op.res)
				sent++
			case syscall.Errno(-op.res) == syscall.EAGAIN:
				// The socket is full: nothing sent hands the reader to its own goroutine.
			default:
				err = syscall.Errno(-op.res)
			}
			if op.r.written(op.w, n, err) {
				next = append(next, op.r)
			}
			*op = ringOp{}
		}
		sh.ringSent.Add(sent)
		if sh.ringErr != nil {
			// The ring is broken: the readers whose sends are in doubt have ended; the rest
			// go on with write(2), and so does every later turn.
			sh.ring.close()
			sh.ring = nil
		}
		sh.ringNext = next
		cur = append(cur[:0], next...)
		clear(next)
	}
	for _, r := range cur { // left by a ring that broke
		buf = r.writeFast(buf)
	}
	clear(cur)
	sh.ringCur = cur[:0]
	return buf
}

// errRingFailed ends a reader whose send was in a ring submission that failed.
var errRingFailed = errors.New("producer: the send ring failed")

// submitOps holds every op's descriptor (so no close can reuse it while the kernel sends to
// it), queues the sends, and submits them in one call. raw.Write holds a descriptor only for
// the length of its callback, so the holds nest: each op's callback holds the next one, and
// the last submits. Nothing in the nest may close a connection (a close waits for the holds);
// the results are settled once it unwinds. A close from elsewhere (the hang-up watch ending a
// reader that gather let go of, ctx, Close) waits there for the submission to return.
func (sh *directShard) submitOps() {
	sh.ringErr = nil
	sh.holdFrom(0)
}

func (sh *directShard) holdFrom(i int) {
	for ; i < len(sh.ops); i++ {
		op := &sh.ops[i]
		sh.at = i
		err := op.r.raw.Write(op.r.hold)
		if op.held {
			return // the rest of the nest ran inside the hold
		}
		if err == nil {
			err = errors.New("producer: the connection's descriptor could not be held")
		}
		op.err = err
	}
	if f := sh.d.ringFault; f != nil {
		if sh.ringErr = f(); sh.ringErr != nil {
			return
		}
	}
	sh.ringErr = sh.ring.submit(sh.reap)
}

// heldAt is the hold callback of the op at sh.at: queue its send, then hold the rest.
func (sh *directShard) heldAt(fd uintptr) {
	i := sh.at
	op := &sh.ops[i]
	op.held = true
	sh.ring.send(int(fd), op.w.b, uint64(i))
	sh.holdFrom(i + 1)
}

// reap records a send's result (inside the nest: nothing else).
func (sh *directShard) reap(user uint64, res int32) {
	if user < uint64(len(sh.ops)) {
		op := &sh.ops[user]
		op.res, op.reaped = res, true
	}
}
