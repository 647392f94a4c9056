# Shared part of the plots (tests/bench/plot/NAME.gp, run by plot.sh): the
# model and the machine of the study in dir, which study-lib.bash records in
# model.txt and machine.txt, for the titles. Loaded, not run.
model = system("cat '".dir."/model.txt' 2>/dev/null")
machine = system("cat '".dir."/machine.txt' 2>/dev/null")
if (strlen(model) == 0) { model = "model not recorded" }
if (strlen(machine) == 0) { machine = "machine not recorded" }
setup = model." on ".machine
