-- The default schema of DESIGN §5: the app's message row and the plane's chunk rows.
CREATE TABLE messages (
    id               text PRIMARY KEY,
    chat_id          text,
    role             text,
    owner            text,
    body             text NOT NULL DEFAULT '',
    -- The CAS column: NOT NULL, because no comparison matches NULL.
    seq              bigint NOT NULL DEFAULT 0,
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'streaming', 'complete', 'cancelled', 'error', 'interrupted')),
    cancel_requested boolean NOT NULL DEFAULT false,
    error            text,
    host             text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE message_chunks (
    id        text PRIMARY KEY,            -- "<stream_id>:<seq>", deterministic: a replay collides with itself
    stream_id text NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    seq       bigint NOT NULL,             -- the chunk's END offset, in UTF-16 code units
    text      text NOT NULL
);

CREATE INDEX message_chunks_stream_seq ON message_chunks (stream_id, seq);
