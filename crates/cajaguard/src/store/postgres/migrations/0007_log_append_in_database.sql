-- Version 7: an append's stored hashes are computed by the database, inside the statement that
-- takes the log's head (store/postgres/log.rs, `append_in_store`). The head's lock is then held
-- from that statement to the COMMIT sent right behind it, never across a round trip to a
-- CajaGuard process, and every audited transaction stops queueing on other processes' wake-ups.
--
-- The hashes are Go sumdb/tlog's `StoredHashesForRecordHash`, which the tlog_tiles crate computes
-- for SQLite and `audit verify` checks on both stores: the leaf hash is SHA-256(0x00 || the
-- record's RFC 8785 bytes), which the caller writes as the bytes before and after the index's
-- digits; then each trailing one bit `level` of the index adds SHA-256(0x01 || left || previous),
-- `left` being hash `level` of record index - 2^level (which completed that subtree).
CREATE FUNCTION cajaguard_log_append(
    leaf_before BYTEA, leaf_after BYTEA,
    p_at TEXT, p_at_us BIGINT, p_tool TEXT, p_verdict TEXT, p_reason TEXT, p_merchant TEXT,
    p_currency TEXT, p_total BIGINT, p_request_id TEXT, p_idempotency_key TEXT,
    p_checkout_id TEXT, p_latency_us BIGINT, p_note TEXT, p_agent TEXT
) RETURNS BIGINT
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n BIGINT;
    hash BYTEA;
    hashes BYTEA;
    earlier BYTEA;
    level INTEGER := 0;
BEGIN
    UPDATE audit_log SET size = size + 1 WHERE id = 1 RETURNING size - 1 INTO n;
    IF n IS NULL THEN
        RAISE EXCEPTION 'the audit log has no head row: the store was altered; run `cajaguard audit verify`'
            USING ERRCODE = 'data_corrupted';
    END IF;
    -- RFC 8785 writes larger integers as floats: the caller's bytes would not be the record's.
    IF n > 9007199254740991 THEN
        RAISE EXCEPTION 'the audit log is full (% records)', n USING ERRCODE = 'program_limit_exceeded';
    END IF;
    hash := sha256('\x00'::BYTEA || leaf_before || convert_to(n::TEXT, 'UTF8') || leaf_after);
    hashes := hash;
    WHILE (n >> level) & 1 = 1 LOOP
        -- A statement of its own, so its snapshot is taken now, with the head held: every record
        -- before this one is committed and seen.
        SELECT log_hashes INTO earlier FROM audit WHERE log_index = n - (1::BIGINT << level);
        IF earlier IS NULL OR length(earlier) < 32 * (level + 1) THEN
            RAISE EXCEPTION 'the audit log''s stored hashes are incomplete (record %): the store was altered; run `cajaguard audit verify`',
                n - (1::BIGINT << level) USING ERRCODE = 'data_corrupted';
        END IF;
        hash := sha256('\x01'::BYTEA || substring(earlier FROM 32 * level + 1 FOR 32) || hash);
        hashes := hashes || hash;
        level := level + 1;
    END LOOP;
    INSERT INTO audit (log_index, at, at_us, tool, verdict, reason, merchant, currency, total,
                       request_id, idempotency_key, checkout_id, latency_us, note, log_hashes, agent)
    VALUES (n, p_at, p_at_us, p_tool, p_verdict, p_reason, p_merchant, p_currency, p_total,
            p_request_id, p_idempotency_key, p_checkout_id, p_latency_us, p_note, hashes, p_agent);
    RETURN n;
END
$$;
