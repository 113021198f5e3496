-- Durable Streams incarnations (issue 23). A path deleted and created again names another
-- stream, and its offsets must not name the old one's positions: an HTTP cache keyed by path and
-- offset would otherwise answer a reader of the new stream with the old stream's body. Every
-- stream takes a number from ds_incarnations when it is created, and every offset it hands out
-- carries that number (the first of the offset's two parts).
--
-- A fork's first offsets are its source's (copy-on-fork keeps them), so a fork also accepts the
-- offsets its ancestors handed out, up to where it shares their data. lineage holds those as
-- pairs: an ancestor's incarnation, then the offset up to which the fork's data is that
-- ancestor's (nearest ancestor first).
CREATE SEQUENCE ds_incarnations;

ALTER TABLE ds_streams
    ADD COLUMN incarnation bigint NOT NULL DEFAULT nextval('ds_incarnations'),
    ADD COLUMN lineage bigint[] NOT NULL DEFAULT '{}';

-- Forks made before this migration learn their lineage from forked_from (every ancestor's row
-- stays while a fork of it exists, soft-deleted if need be).
WITH RECURSIVE chain (path, ancestor, shared, depth) AS (
    SELECT path, forked_from, fork_offset, 1 FROM ds_streams WHERE forked_from IS NOT NULL
    UNION ALL
    SELECT c.path, s.forked_from, least(c.shared, s.fork_offset), c.depth + 1
        FROM chain c JOIN ds_streams s ON s.path = c.ancestor WHERE s.forked_from IS NOT NULL
)
UPDATE ds_streams d SET lineage = (
    SELECT array_agg(v.x ORDER BY c.depth, v.o)
        FROM chain c JOIN ds_streams a ON a.path = c.ancestor,
        LATERAL (VALUES (1, a.incarnation), (2, coalesce(c.shared, 0))) AS v (o, x)
        WHERE c.path = d.path)
WHERE d.forked_from IS NOT NULL;
