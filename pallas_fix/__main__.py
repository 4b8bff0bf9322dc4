from pallas_fix.frontends.cli.app import main

main()
