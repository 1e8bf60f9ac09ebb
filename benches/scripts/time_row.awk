# One markdown table row from the report of `/usr/bin/time -v -o FILE`:
# `| NAME | wall | user CPU | system CPU | peak RSS |`, and a last column
# `| GREW MiB |` when -v grew=BYTES is given. Used by big_files.sh and
# many_files.sh:
#
#   awk -v name=LABEL [-v grew=BYTES] -f benches/scripts/time_row.awk FILE
/Elapsed \(wall clock\)/ { n = split($NF, p, ":"); wall = 0;
                           for (i = 1; i <= n; i++) wall = wall * 60 + p[i] }
/User time/ { user = $NF }
/System time/ { sys = $NF }
/Maximum resident set size/ { rss = $NF }
END {
    printf "| %s | %.2f s | %.2f s | %.2f s | %.0f MiB |", name, wall, user, sys, rss / 1024
    if (grew != "") printf " %.1f MiB |", grew / 1048576
    printf "\n"
}
