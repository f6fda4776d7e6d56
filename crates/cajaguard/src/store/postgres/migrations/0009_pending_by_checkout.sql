-- Version 9: the requests waiting on each checkout. A block on a checkout replaces the requests
-- still waiting on it for another basket (`Tx::supersede_pending`): the checkout holds one basket
-- at a time, so only the latest is worth a human's decision, and an agent that blocks one
-- checkout again and again (a new instrument id or basket each time) cannot fill the list that
-- every status read, `pending` and the approval page go through. An approval already filed for
-- a superseded request still counts if its basket comes back: the gate matches approvals by
-- digest, not by the pending row.
CREATE INDEX pending_waiting_by_checkout ON pending (checkout_id) WHERE state = 'pending';
