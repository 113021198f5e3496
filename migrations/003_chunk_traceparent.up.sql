-- The W3C traceparent of the checkpoint that wrote a chunk: logical replication carries no
-- trace context, so the CDC reader and the view read it from the row to continue the trace.
ALTER TABLE message_chunks ADD COLUMN traceparent text;
