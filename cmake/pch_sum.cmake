# Writes OUT = the checksum ccache hashes in place of the precompiled header (pch_external_checksum).
# It must change whenever the .gch could: TEXT is the PCH header preprocessed under the PCH's flags
# (every header's content, every macro), ID the compiler, its version and the flags that are not
# macros. No path of the build folder enters, so every clone writes the same .sum for the same PCH.
# Usage: cmake -DTEXT=file -DID=string -DOUT=file -P pch_sum.cmake
file(SHA256 "${TEXT}" text_hash)
string(SHA256 id_hash "${ID}")
file(WRITE "${OUT}" "cpbench-pch-sum-v1 ${text_hash} ${id_hash}\n")
