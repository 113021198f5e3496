package checkpoint_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/producer"
)

// A checkpoint PostgreSQL refuses for its data (here an app's column narrower than a slice:
// SQLSTATE 22001) cannot succeed on a retry. The Store marks it permanent, and the plane seals
// the stream error with exactly what is durable, once, instead of retrying forever while its
// close answers 503.
func TestADataExceptionSealsTheStreamWithWhatIsDurable(t *testing.T) {
	t.Parallel()
	b := setup(t, withHost("h1"))
	ctx := t.Context()
	_, err := b.db.Pool.Exec(ctx, "ALTER TABLE message_chunks ALTER COLUMN text TYPE varchar(20)")
	require.NoError(t, err)
	s := b.open(t, "m1")
	sub, err := b.plane.Subscribe(ctx, producer.SubscribeInput{StreamID: "m1"})
	require.NoError(t, err)
	require.NoError(t, s.Push("fits"))
	_, err = s.Flush(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Push(strings.Repeat("x", 40)))
	_, err = s.Flush(ctx)
	require.ErrorIs(t, err, producer.ErrPermanent)
	require.ErrorContains(t, err, "22001")
	<-s.Done()
	require.ErrorIs(t, s.Close(ctx), producer.ErrPermanent, "a close hears how the stream ended")
	r := b.durable(t, "m1")
	require.Equal(t, "error", r.status)
	require.Equal(t, "fits", r.text, "sealed with what was durable, nothing more")
	require.NotNil(t, r.err)
	require.Contains(t, *r.err, "22001")
	var end producer.Frame
	for {
		f, err := sub.Next(ctx)
		require.NoError(t, err)
		if f.Terminal() {
			end = f
			break
		}
	}
	require.Equal(t, producer.FrameEnd, end.Type)
	require.Equal(t, producer.StatusError, end.Status)
	require.Equal(t, producer.Seq(4), end.Seq, "the end says what the row holds")
}
