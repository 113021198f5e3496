-- The WAL diet (issue 11). Measured with pg_waldump on a paced multilingual workload, each
-- checkpoint's chunk row paid for three records beyond the row itself:
--   * a second B-tree entry: the text key "<stream_id>:<seq>" and the (stream_id, seq) index
--     said the same thing twice. (stream_id, seq) becomes the primary key and the id column
--     goes; a chunk DELETE then carries (stream_id, seq) under REPLICA IDENTITY DEFAULT, which
--     names its stream without parsing.
--   * a row-lock record: the foreign key's check takes KEY SHARE on the message row the same
--     transaction has just updated (the new version has no lock of ours yet), and logs it. The
--     chunk insert is driven by the length compare-and-swap's RETURNING, so no chunk can land
--     without its message row; the cascade on delete moves to a statement trigger, which costs
--     nothing on insert.
--   * a speculative-insertion confirm, for ON CONFLICT DO NOTHING, which the checkpoint no
--     longer uses (the compare-and-swap refuses a replay before the insert runs).
ALTER TABLE message_chunks DROP CONSTRAINT message_chunks_stream_id_fkey;
ALTER TABLE message_chunks DROP CONSTRAINT message_chunks_pkey;
DROP INDEX message_chunks_stream_seq;
ALTER TABLE message_chunks DROP COLUMN id;
ALTER TABLE message_chunks ADD PRIMARY KEY (stream_id, seq);

CREATE FUNCTION rindle_delete_message_chunks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM message_chunks c USING gone g WHERE c.stream_id = g.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_delete_chunks AFTER DELETE ON messages
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
    EXECUTE FUNCTION rindle_delete_message_chunks();
