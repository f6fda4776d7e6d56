//! Approver key files (SPEC §6): where they live, writing them with care (0600 in a 0700 directory,
//! create-new, never overwritten without `--force`), and reading them with permission checks.
