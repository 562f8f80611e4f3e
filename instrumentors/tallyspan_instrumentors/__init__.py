"""tallyspan's instrumentors: one module or small package per instrumented library."""
