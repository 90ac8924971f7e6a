from geode.cli import main

main()
