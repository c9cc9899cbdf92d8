# Shared by the shell tests here (sourced): `check NAME COMMAND...` is one test case, which passes
# when the command succeeds; `check_summary PREFIX` prints the counts and fails when any failed.
passed=0
failed=0

check() {
  local name=$1
  shift
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name" >&2
  fi
}

check_summary() {
  echo "$1$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
