//! The git stage: revisions, merge-base and worktrees (being written).
