package producer_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/rindle-sh/rindle-go/producer"
)

// A plane on a commit callback that keeps the durable text in memory (an app would write its own
// rows): a producer opens a stream, pushes deltas, and seals it; a reader that already holds the
// first 6 units joins at offset 6 and receives exactly the rest.
func ExamplePlane() {
	ctx := context.Background()
	var mu sync.Mutex
	durable := map[string]string{}
	commit := func(_ context.Context, in producer.CommitInput) (producer.AppendResult, error) {
		mu.Lock()
		defer mu.Unlock()
		switch in.Kind {
		case producer.CommitAppend:
			a := in.Append
			have := durable[a.StreamID]
			if n := producer.Len16(have); n >= a.From && n < a.Seq { // apply only the unseen suffix
				durable[a.StreamID] = have + producer.Slice16(a.Text, n-a.From, a.Seq-a.From)
			}
			return producer.AppendResult{Durable: producer.Len16(durable[a.StreamID]), ReadBack: true}, nil
		case producer.CommitClose:
			c := in.Close
			durable[c.StreamID] = producer.Slice16(durable[c.StreamID], 0, c.From) + producer.Slice16(c.Body, c.From-c.BodyFrom, c.Seq-c.BodyFrom)
		}
		return producer.AppendResult{}, nil
	}
	plane, err := producer.New(producer.Config{
		Committer: producer.CommitFunc(commit),
		Authorize: func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil },
	})
	if err != nil {
		panic(err)
	}
	defer plane.Close()

	stream, err := plane.Open(ctx, producer.OpenStreamInput{StreamID: "m1"})
	if err != nil {
		panic(err)
	}
	for _, delta := range []string{"héllo", " 😀", " world"} {
		if err := stream.Push(delta); err != nil {
			panic(err)
		}
	}
	sub, err := plane.Subscribe(ctx, producer.SubscribeInput{StreamID: "m1", From: 6})
	if err != nil {
		panic(err)
	}
	if err := stream.Close(ctx); err != nil {
		panic(err)
	}
	for {
		f, err := sub.Next(ctx)
		if err != nil {
			panic(err)
		}
		switch f.Type {
		case producer.FrameOpen:
			fmt.Printf("open at %d of %d\n", f.From, f.Seq)
		case producer.FrameChunk:
			fmt.Printf("chunk [%d,%d) %q\n", f.From, f.Seq, f.Text)
		case producer.FrameEnd:
			fmt.Printf("end %s at %d\n", f.Status, f.Seq)
		}
		if f.Terminal() {
			break
		}
	}
	mu.Lock()
	fmt.Printf("durable %q\n", durable["m1"])
	mu.Unlock()
	// Output:
	// open at 6 of 14
	// chunk [6,14) "😀 world"
	// end complete at 14
	// durable "héllo 😀 world"
}
