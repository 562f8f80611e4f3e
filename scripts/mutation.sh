#!/usr/bin/env bash
# Mutation testing with mutmut 3 (the `mutation` extra: pip install -e '.[test,mutation]'), one area at a time, each against its own tests.
#
# mutmut only maps mutants to tests for code under ./ or src/, and our packages live in four roots
# (src/, processors/, exporters/, instrumentors/). So each run works in a staging copy,
# build/mutation/AREA/, where all four packages sit side by side under src/; only the area's modules
# are mutated. Tests that need ../shared/data skip there: the score measures the self-contained tests.
#
# Usage: scripts/mutation.sh AREA [mutmut args]     AREA: engine | processors | store | cli
#        scripts/mutation.sh engine                 run, then print the summary and the survivors
#        scripts/mutation.sh engine results         list the survivors of the last run again
#        cd build/mutation/engine && mutmut show NAME     the diff of one mutant
# Environment: MUTATION_JOBS (default 2, the cores here). Not in CI: an area takes 5 to 30 minutes.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
AREA="${1:-}"
shift || true
VENV_BIN="${VENV_BIN:-$(dirname "$(command -v python || echo .)")}"
[ -x "${VENV_BIN}/mutmut" ] || VENV_BIN="${ROOT}/.venv/bin"

case "${AREA}" in
engine)
    MUTATE="src/tallyspan/_engine/_checks.py src/tallyspan/_engine/_language.py src/tallyspan/_engine/_refusal.py
        src/tallyspan/_engine/_relevance.py src/tallyspan/_engine/_repetition.py src/tallyspan/_engine/_jsonschema.py
        src/tallyspan/_books/_ledger.py src/tallyspan/_engine/_scripts.py src/tallyspan/_engine/_literals.py
        src/tallyspan/_engine/_code.py"
    TESTS="tests/core/test_checks.py tests/core/test_engine_rules.py tests/core/test_language.py
        tests/core/test_relevance.py tests/core/test_repetition.py tests/core/test_ledger.py
        tests/core/test_contracts.py tests/core/test_jsonschema.py tests/core/test_refusal.py
        tests/core/test_literals.py tests/core/test_scripts.py tests/core/test_code.py"
    # Left out: tests of the patterns' wall-clock budget (test_hostile_contracts.py and the one below);
    # mutmut's trampolines slow the engine enough to spend the budget on clean code.
    DESELECT="tests/core/test_checks.py::test_a_hostile_regex_times_out_instead_of_hanging_and_is_counted"
    ;;
processors)
    MUTATE="src/tallyspan_processors/_checks.py src/tallyspan_processors/_ledger.py
        src/tallyspan_processors/_ledger_sources.py src/tallyspan_processors/_worker.py"
    TESTS="tests/processors"
    # Left out: the scale tests (10k-100k spans, 10-35 s each, 90 s per surviving mutant); what they
    # check (drops counted, a stuck sink, a bounded buffer) the small tests of test_worker*.py check too.
    DESELECT="tests/processors/test_worker_stress.py::test_a_stuck_app_processor_drops_only_its_own_spans
        tests/processors/test_worker_stress.py::test_dropped_run_spans_do_not_push_a_live_run_out_of_the_ledger
        tests/processors/test_worker_stress.py::test_a_burst_of_100k_spans_never_blocks_the_app_and_every_drop_is_counted
        tests/processors/test_worker_stress.py::test_content_of_50k_dropped_model_spans_stays_bounded_and_is_freed"
    ;;
store)
    MUTATE="src/tallyspan_exporters/_store.py src/tallyspan_exporters/_writer.py src/tallyspan/_memory.py"
    TESTS="tests/exporters/test_store.py tests/exporters/test_store_trouble.py
        tests/exporters/test_store_counters.py tests/exporters/test_ledger_logs.py
        tests/exporters/test_store_writer.py tests/exporters/test_store_processor.py
        tests/exporters/test_store_rows.py tests/core/test_memory.py"
    ;;
cli)
    MUTATE="src/tallyspan/cli/*.py src/tallyspan/_store/_store_queries.py src/tallyspan/_store/_store_prune.py src/tallyspan/_store/_store_ledger.py
        src/tallyspan/_store/_store_timeline.py"
    TESTS="tests/cli"
    # mutmut's CPU limit per mutant counts the tests' own time, not their fixtures' (the recorded store,
    # the demo and export workloads take seconds): without this margin a mutant that changes nothing could
    # run out of CPU in a fixture and count as a timeout.
    TIMEOUT_CONSTANT=10.0
    ;;
*)
    echo "usage: $0 engine|processors|store|cli [mutmut args]" >&2
    exit 2
    ;;
esac

STAGE="${ROOT}/build/mutation/${AREA}"
# A fresh copy of the code and tests. mutmut never refreshes a copied file it does not mutate, so
# its mutants/ goes too, unless asked to keep it (`results`/`show` on the last run, or MUTATION_KEEP=1).
if [ "$#" -eq 0 ] && [ -z "${MUTATION_KEEP:-}" ]; then
    rm -rf "${STAGE}/mutants"
fi
mkdir -p "${STAGE}/src"
for package in src/tallyspan processors/tallyspan_processors exporters/tallyspan_exporters \
    instrumentors/tallyspan_instrumentors; do
    rm -rf "${STAGE}/src/$(basename "${package}")"
    cp -r "${ROOT}/${package}" "${STAGE}/src/"
done
rm -rf "${STAGE}/tests"
cp -r "${ROOT}/tests" "${STAGE}/tests"
find "${STAGE}/src" "${STAGE}/tests" -name __pycache__ -prune -exec rm -rf {} +
rm -rf "${STAGE}/scripts"
cp -r "${ROOT}/scripts" "${STAGE}/scripts"
cp "${ROOT}/pyproject.toml" "${STAGE}/pyproject.toml"

{
    echo "[mutmut]"
    echo "source_paths = src"
    echo "also_copy = scripts"
    echo "only_mutate ="
    for path in ${MUTATE}; do echo "    ${path}"; done
    echo "pytest_add_cli_args_test_selection ="
    for path in ${TESTS}; do echo "    ${path}"; done
    printf 'pytest_add_cli_args =\n    -p\n    no:cacheprovider\n    -q\n'
    for test in ${DESELECT:-}; do printf '    --deselect\n    %s\n' "${test}"; done
    echo "timeout_multiplier = 5.0"
    echo "timeout_constant = ${TIMEOUT_CONSTANT:-1.0}"
} >"${STAGE}/setup.cfg"

cd "${STAGE}"
# mutmut puts mutants/src first on the path itself. No PYTHONPATH: a subprocess a test starts (with
# another working directory) cannot load mutmut's configuration, so it runs the installed, unmutated code.
unset PYTHONPATH
if [ "$#" -gt 0 ]; then
    exec "${VENV_BIN}/mutmut" "$@"
fi
"${VENV_BIN}/mutmut" run --max-children "${MUTATION_JOBS:-2}"
"${VENV_BIN}/mutmut" results
