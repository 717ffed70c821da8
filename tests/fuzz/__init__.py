"""Coverage-guided fuzzing: libFuzzer harnesses of the native decoders (native/), atheris
harnesses of the Python-side decoders (python/), their seed corpora (corpus/) and the runner
(run.py; scripts/fuzz.sh). See docs/reliability/fuzzing.md."""
