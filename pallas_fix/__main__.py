from pallas_fix.frontends.cli import main

main()
