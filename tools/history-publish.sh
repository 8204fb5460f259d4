#!/usr/bin/env bash
# Appends one measured commit to the benchmark history on the `bench-history` branch and
# publishes its trend: run by the history jobs on main (.github/workflows/bench-history.yml and
# the nightly GPU job), never on pull-request code.
#
#   tools/history-publish.sh HARNESS_BIN RESULTS_JSON
#
# The branch holds `history/<host fingerprint>/<sha>.json` (`harness history add`), `trend.md`
# and `charts/*.svg` (`harness trend --charts`). It is checked out in a separate worktree, so
# the job's own checkout is never touched; a push that lost a race with another job is retried
# on top of the new branch head (each job only adds its own commit's file, so they never
# conflict). With GITHUB_TOKEN set and ALERTS=1, `harness alert` opens or updates one issue per
# change point, linking the charts on the branch.
set -euo pipefail
harness="$(realpath "$1")"
results="$(realpath "$2")"
branch="${HISTORY_BRANCH:-bench-history}"
repo="${GITHUB_REPOSITORY:?GITHUB_REPOSITORY is not set}"
server="${GITHUB_SERVER_URL:-https://github.com}"
wt="$(mktemp -d)/history"
cleanup() { git worktree remove --force "$wt" >/dev/null 2>&1 || true; }
trap cleanup EXIT
# The job's checkout keeps no credentials (persist-credentials: false): git gets the token as
# a header for these calls only, as actions/checkout does, never in a URL or on disk.
git_auth=()
if [[ -n "${GITHUB_TOKEN:-}" ]]; then
  basic="$(printf 'x-access-token:%s' "$GITHUB_TOKEN" | base64 -w0)"
  echo "::add-mask::$basic"
  git_auth=(-c "http.https://github.com/.extraheader=AUTHORIZATION: basic $basic")
fi

# One attempt; every step checked (`set -e` does not apply inside a function called from `if`).
publish_once() {
  git worktree remove --force "$wt" >/dev/null 2>&1 || true
  if git "${git_auth[@]}" fetch --quiet origin "$branch" 2>/dev/null; then
    git worktree add --quiet --detach "$wt" FETCH_HEAD || return 1
  else
    echo "no $branch branch yet: starting it"
    git worktree add --quiet --detach "$wt" || return 1
    git -C "$wt" checkout --quiet --orphan tmp-history || return 1
    git -C "$wt" rm -r --quiet --force --ignore-unmatch . || return 1
  fi
  "$harness" history add --results "$results" --dir "$wt/history" || return 1
  # Relative paths: the page links its charts as charts/<file>.svg.
  (cd "$wt" && "$harness" trend --history history --charts charts > trend.md) || return 1
  git -C "$wt" add -A history charts trend.md || return 1
  git -C "$wt" -c user.name="github-actions[bot]" \
    -c user.email="41898282+github-actions[bot]@users.noreply.github.com" \
    commit --quiet -m "history: $(jq -r .head.sha "$results" | cut -c1-12) ($(jq -r .suite "$results"))" ||
    return 1
  git -C "$wt" "${git_auth[@]}" push --quiet origin "HEAD:refs/heads/$branch" || return 1
}

for attempt in 1 2 3; do
  if publish_once; then
    break
  fi
  if [[ $attempt == 3 ]]; then
    echo "::error::could not push to $branch after 3 attempts"
    exit 1
  fi
  echo "push to $branch failed (attempt $attempt): fetching its new head and trying again"
  sleep $((attempt * 5))
done

if [[ "${ALERTS:-0}" == 1 ]]; then
  "$harness" alert --history "$wt/history" \
    --chart-url "$server/$repo/blob/$branch/charts"
fi
