-- Version 8: which agent of the service made each checkout (store/agents.rs). The service's
-- agents share one shop link, so the shop cannot tell them apart: without this, an agent that
-- learns another's checkout id could read it, change its basket or destination before the other
-- pays, cancel it, or pay it. A checkout made through the service is recorded here before its
-- agent is told its id; a service session refuses every checkout call on a checkout that is not
-- its agent's. `cajaguard mcp` on stdio (one user, no agent) neither records nor checks.
CREATE TABLE checkout_agents (
    checkout_id TEXT PRIMARY KEY,
    agent       TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
