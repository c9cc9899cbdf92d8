// The target that compiles the test suites' precompiled header (tests/CMakeLists.txt); no code.
