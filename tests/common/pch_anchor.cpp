// The one source of weft_test_pch: the object library that builds the test executables' shared
// precompiled header (CMakeLists.txt, WEFT_TEST_OPT and weft_test_pch).
