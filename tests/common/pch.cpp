// tests/common/pch.cpp — the translation unit of the tests' precompiled header (CMakeLists.txt:
// weft_test_pch); every test executable reuses it.
