# Claude Code: the service over Streamable HTTP, the token from the environment.
claude mcp add --transport http cajaguard http://127.0.0.1:8376/mcp \
  --header "Authorization: Bearer ${CAJAGUARD_TOKEN}"
